"""The numbers behind every plot of the campaign report, per cycle (``step`` 0 = base), also
written as JSON series files that ``dvc plots`` reads (``DVC_PLOTS`` goes into ``dvc.yaml``)."""

from __future__ import annotations

import re
from collections import Counter
from statistics import fmean
from typing import Any

from selfevolve.headline import HEADLINE
from selfevolve.reporting.collect import CampaignData

ROLES = ("challenger", "planner", "solver", "critic")
SERIES = ("headline", "forms", "benchmarks", "pool", "pool_levels", "pool_pass_rates", "critic", "rewards", "mass", "mass_history")




def _benchmark_names(evaluate: dict) -> list[str]:
    """Benchmarks in an evaluate metrics dict: every ``<name>_n`` with a ``<name>_accuracy``."""
    names = [k[:-2] for k, v in evaluate.items() if k.endswith("_n") and isinstance(v, (int, float)) and f"{k[:-2]}_accuracy" in evaluate]
    return sorted(names, key=lambda n: (n != "heldout", n))


def _source_kind(q) -> str:
    return (q.source or "unknown").split(":")[0]


def _round(v: Any, nd: int = 6) -> Any:
    return round(v, nd) if isinstance(v, float) else v


def compute_series(data: CampaignData) -> dict[str, list[dict]]:
    """The per-cycle series (JSON-ready lists of row dicts, each with ``cycle`` and ``step``).

    ``headline``: the headline accuracies and reach (``selfevolve.headline``, metric keys) per cycle.
    ``forms``: held-out accuracy per question form and cycle (``form``, ``accuracy``, ``frontier``).
    ``benchmarks``: ``<name>_accuracy``, ``<name>_pass_at_<k>`` per cycle (every benchmark of any
    cycle, ``None`` where absent). ``pool``: ``pool_size``, per-source counts ``<source>_questions``,
    ``measured`` (questions with a pass rate), ``mean_pass_rate``, ``level_<L>`` counts.
    ``pool_levels``: one row per (cycle, level) with ``count`` and ``fraction``.
    ``pool_pass_rates``: one row per measured question (``question_id``, ``level``, ``source``,
    ``pass_rate``). ``critic``: ``critic_question_pass_rate``, ``critic_plan_pass_rate`` and mean
    scores. ``rewards``: ``reward_<role>``. ``mass``: ``<domain>_champion_fitness``,
    ``<domain>_champion_accuracy``, ``<domain>_single_agent_fitness``, ``<domain>_champion``.
    ``mass_history``: one row per (cycle, domain, generation) with ``champion_fitness``.
    Training-only series (critic, rewards, mass) have no ``base`` row."""
    step = {c: i for i, c in enumerate(data.cycles)}
    out: dict[str, list[dict]] = {name: [] for name in SERIES}

    # headline metrics (selfevolve.headline), every field on every row (dvc plots needs them)
    for c in data.cycles:
        values = {h.key: data.metric(c, h.stage, h.key) for h in HEADLINE if h.kind in ("accuracy", "digits")}
        if any(v is not None for v in values.values()):
            out["headline"].append({"cycle": c, "step": step[c], **values})

    # benchmarks
    keys: list[str] = []
    for c in data.cycles:
        ev = data.metrics.get(c, {}).get("evaluate", {})
        for name in _benchmark_names(ev):
            for k in [f"{name}_accuracy", *sorted((k for k in ev if re.fullmatch(rf"{re.escape(name)}_pass_at_(\d+)", k) and not k.endswith("_pass_at_1")),
                                                    key=lambda s: int(s.rsplit("_", 1)[1]))]:
                if k not in keys:
                    keys.append(k)
    for c in data.cycles:
        if "evaluate" in data.metrics.get(c, {}):
            out["benchmarks"].append({"cycle": c, "step": step[c], **{k: data.metric(c, "evaluate", k) for k in keys}})

    # held-out accuracy per form (the arith ladder's forms; frontier forms marked)
    split_of = {q.form: q.split for q in data.heldout_questions}
    for c in data.cycles:
        for form, value in data.form_accuracy(c).items():
            out["forms"].append({"cycle": c, "step": step[c], "form": form, "accuracy": _round(value),
                                 "frontier": split_of.get(form) == "frontier", "split": split_of.get(form)})

    # pool
    levels = sorted({q.level for qs in data.pools.values() for q in qs if q.level is not None})
    sources = sorted({_source_kind(q) for qs in data.pools.values() for q in qs})
    for c in data.cycles:
        if c in data.pools:
            qs = data.pools[c]
            rates = [q.measured.pass_rate for q in qs if q.measured is not None]
            by_source = Counter(_source_kind(q) for q in qs)
            by_level = Counter(q.level for q in qs)
            row = {"cycle": c, "step": step[c], "pool_size": len(qs), **{f"{s}_questions": by_source.get(s, 0) for s in sources},
                   "measured": len(rates), "mean_pass_rate": _round(fmean(rates)) if rates else None,
                   **{f"level_{lv}": by_level.get(lv, 0) for lv in levels}}
            out["pool"].append(row)
            total = len(qs) or 1
            for lv in [*levels, None]:
                if by_level.get(lv):
                    out["pool_levels"].append({"cycle": c, "step": step[c], "level": "unknown" if lv is None else lv,
                                               "count": by_level[lv], "fraction": _round(by_level[lv] / total)})
            for q in qs:
                if q.measured is not None:
                    out["pool_pass_rates"].append({"cycle": c, "step": step[c], "question_id": q.id, "level": q.level,
                                                   "source": _source_kind(q), "pass_rate": _round(q.measured.pass_rate)})
        elif data.metric(c, "rewards", "pool_size") is not None:
            out["pool"].append({"cycle": c, "step": step[c], "pool_size": int(data.metric(c, "rewards", "pool_size")),
                                "challenger_questions": data.metric(c, "rewards", "pool_challenger_questions"),
                                "mean_pass_rate": data.metric(c, "rewards", "pool_mean_pass_rate")})

    for c in data.cycles[1:]:
        # critic
        qp = data.metric(c, "critic_questions", "critic_question_pass_rate")
        pp = data.metric(c, "critic_plans", "critic_plan_pass_rate")
        if qp is not None or pp is not None:
            out["critic"].append({"cycle": c, "step": step[c], "critic_question_pass_rate": qp, "critic_plan_pass_rate": pp,
                                  "critic_question_mean_score": data.metric(c, "critic_questions", "critic_question_mean_score"),
                                  "critic_plan_mean_score": data.metric(c, "critic_plans", "critic_plan_mean_score")})
        # rewards
        rw = {f"reward_{r}": data.metric(c, "rewards", f"reward_{r}") for r in ROLES}
        if any(v is not None for v in rw.values()):
            out["rewards"].append({"cycle": c, "step": step[c], **rw})
        # MASS
        row = _mass_row(data, c)
        if row:
            out["mass"].append({"cycle": c, "step": step[c], **row})
        for h in (data.mass.get(c) or {}).get("history") or []:
            if isinstance(h, dict) and isinstance(h.get("champion_fitness"), (int, float)):
                out["mass_history"].append({"cycle": c, "step": step[c], "domain": h.get("domain"), "generation": h.get("generation"),
                                            "champion_fitness": _round(float(h["champion_fitness"])),
                                            "best_child_fitness": h.get("best_child_fitness"), "champion": h.get("champion")})
    # every mass row has every domain's fields (dvc plots needs the fields on each row)
    fields = sorted({k for r in out["mass"] for k in r if k not in ("cycle", "step")})
    out["mass"] = [{"cycle": r["cycle"], "step": r["step"], **{k: r.get(k) for k in fields}} for r in out["mass"]]
    return {name: [{k: _round(v) for k, v in r.items()} for r in rows] for name, rows in out.items()}


def _single_agent_id(domain: str) -> str | None:
    """Design id of MASS's single-agent reference for ``domain`` (None for an unknown domain)."""
    from selfevolve.mass.design import single_agent

    try:
        return single_agent(domain).design_id
    except Exception:  # noqa: BLE001 - a domain the design module does not know: no reference
        return None


def _mass_row(data: CampaignData, cycle: str) -> dict:
    """Champion fitness/accuracy and single-agent reference per domain: ``search.json`` first,
    ``metrics/<c>/mass_search.json`` (``mass_<domain>_fitness`` ...) as fallback."""
    row: dict[str, Any] = {}
    search = data.mass.get(cycle) or {}
    for dom, ev in (search.get("champion_evaluations") or {}).items():
        if not isinstance(ev, dict):
            continue
        row[f"{dom}_champion_fitness"] = ev.get("fitness")
        row[f"{dom}_champion_accuracy"] = ev.get("accuracy")
        row[f"{dom}_champion"] = ev.get("design_id")
        ref_id = _single_agent_id(dom)
        ref = next((e for e in search.get("evaluated") or [] if isinstance(e, dict) and e.get("domain") == dom
                    and e.get("design_id") == ref_id), None)
        if ref is not None:
            row[f"{dom}_single_agent_fitness"] = ref.get("fitness")
    for key, val in data.metrics.get(cycle, {}).get("mass_search", {}).items():
        m = re.fullmatch(r"mass_([a-z]+)_(fitness|accuracy|single_agent_fitness)", key)
        if m and isinstance(val, (int, float)):
            name = {"fitness": "champion_fitness", "accuracy": "champion_accuracy"}.get(m.group(2), m.group(2))
            row.setdefault(f"{m.group(1)}_{name}", float(val))
    return {k: _round(v) for k, v in row.items() if v is not None}


#: ``dvc plots show``'s page (``.dvc/config`` ``plots.html_template``, relative to ``.dvc/``), written
#: by :func:`write_plots_page`: the plots work offline.
PLOTS_PAGE = "reports/plots_template.html"

_PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC plots: the campaign per cycle</title>
    <script>%s</script>
    <style>table { border-spacing: 15px; }</style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def write_plots_page(path) -> None:
    """Write the HTML page ``dvc plots show`` fills (DVC's own loads Vega from a CDN, a blank page
    offline): Vega, Vega-Lite and Vega-Embed inlined from the ``vl-convert-python`` package, so
    ``dvc_plots/index.html`` renders with no network. Raises ``ImportError`` without the package."""
    from pathlib import Path

    import vl_convert

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(_PAGE % vl_convert.javascript_bundle().replace("</script", "<\\/script"), encoding="utf-8")


#: The DVC plot template of every plot: a line with a point per cycle on whole-number steps
#: (``.dvc/plots/cycles.json``: DVC's ``simple`` template with an ordinal x axis).
PLOT_TEMPLATE = "cycles"


def _plot(title: str, series: str, fields: list[str], y_label: str) -> dict:
    return {title: {"template": PLOT_TEMPLATE, "x": "step", "y": {f"reports/{series}.json": fields},
                    "x_label": "cycle (0 = base)", "y_label": y_label}}


#: The ``plots`` section of ``dvc.yaml`` (``dvc plots show`` after ``selfevolve report``).
DVC_PLOTS: list[dict] = [
    _plot("held-out accuracy per cycle: frontier, seed forms, beyond", "headline",
          ["heldout_frontier_accuracy", "heldout_seed_accuracy", "heldout_beyond_accuracy"], "greedy accuracy"),
    _plot("reach per cycle: longest sum right half / nine tenths of the time", "headline",
          ["heldout_reach_50", "heldout_reach_90"], "operand digits"),
    _plot("benchmark scores per cycle (0 = base)", "benchmarks", ["heldout_accuracy"], "accuracy (pass@1)"),
    _plot("question pool size per cycle", "pool", ["pool_size", "challenger_questions"], "questions"),
    _plot("question pool mean Solver pass rate", "pool", ["mean_pass_rate"], "mean pass rate"),
    _plot("question pool levels", "pool", ["level_1", "level_2", "level_3", "level_4", "level_5"], "questions at level"),
    _plot("critic pass rates per cycle", "critic", ["critic_question_pass_rate", "critic_plan_pass_rate"], "pass rate"),
    _plot("mean reward per role per cycle", "rewards", [f"reward_{r}" for r in ROLES], "mean reward"),
    _plot("MASS champion fitness per cycle", "mass", ["math_champion_fitness", "math_single_agent_fitness"], "fitness"),
]

