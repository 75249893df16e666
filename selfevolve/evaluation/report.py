"""Round-over-round report of a campaign: PNG plots, a markdown report, series files for ``dvc plots``.

``build_report(root, out_dir)`` reads what the stages wrote (paths from ``selfevolve.paths``):

==============================================  ===============================================
source                                          used for
==============================================  ===============================================
``params.yaml`` ``cycles`` and ``campaign``     the cycles (``base`` first) and the MLflow experiment
``metrics/<c>/evaluate.json``                   benchmark scores (``<name>_accuracy``, ``<name>_pass_at_<k>``)
``data/cycles/<c>/pool.jsonl``                  pool size by source, level distribution, pass rates
``metrics/<c>/rewards.json``                    mean reward per role; pool size when the pool file is missing
``metrics/<c>/critic_questions.json``,          critic pass rates (question quality gate, plan gate)
``metrics/<c>/critic_plans.json``
``data/cycles/<c>/mass/search.json``            MASS champion fitness per domain, search history
``metrics/<c>/mass_search.json``                MASS numbers when ``search.json`` is missing
``metrics/<c>/verify.json``, ``train_rl.json``  Solver accuracy and best validation accuracy (table)
==============================================  ===============================================

and writes into ``out_dir`` (default ``<root>/reports``):

* ``benchmarks.png``, ``pool_size.png``, ``pool_levels.png``, ``pool_pass_rate.png``,
  ``critic_pass_rates.png``, ``rewards.png``, ``mass_fitness.png`` (matplotlib, Agg canvas; a plot
  whose data is missing is still written and says what is missing);
* ``report.md``: a per-cycle table and every figure with a caption;
* series files (JSON lists of row objects, ``step`` 0 = base, 1.. = cycles) that ``dvc plots`` can
  read: ``benchmarks.json``, ``pool.json``, ``pool_levels.json``, ``pool_pass_rates.json``,
  ``critic.json``, ``rewards.json``, ``mass.json``, ``mass_history.json``.

With ``track=True`` the report is logged to MLflow as the nested run ``campaign/report`` of the
campaign's experiment (``selfevolve.tracking.stage_run``: a re-run replaces it), with the files as
artifacts under ``report/`` and each numeric series as metrics with ``step`` = cycle index.
Nothing here raises for missing or malformed stage outputs (they are listed under "Missing data");
a missing or invalid params file raises ``ParamsError``.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

log = logging.getLogger("selfevolve")

__all__ = ["FIGURES", "CampaignData", "build_report", "collect_campaign", "compute_series", "render_figures", "write_markdown"]

#: figure name -> (file name, title)
FIGURES: dict[str, tuple[str, str]] = {
    "benchmarks": ("benchmarks.png", "Benchmark scores per cycle"),
    "pool_size": ("pool_size.png", "Question pool size per cycle"),
    "pool_levels": ("pool_levels.png", "Question pool difficulty: level distribution per cycle"),
    "pool_pass_rate": ("pool_pass_rate.png", "Question pool difficulty: Solver pass rates per cycle"),
    "critic": ("critic_pass_rates.png", "Critic pass rates per cycle"),
    "rewards": ("rewards.png", "Mean reward per role per cycle"),
    "mass": ("mass_fitness.png", "MASS champion fitness per cycle"),
}
ROLES = ("challenger", "planner", "solver", "critic")
SERIES = ("benchmarks", "pool", "pool_levels", "pool_pass_rates", "critic", "rewards", "mass", "mass_history")


# ------------------------------------------------------------------------------------------
# reading the campaign
# ------------------------------------------------------------------------------------------


@dataclass
class CampaignData:
    """Everything the report reads. ``cycles`` starts with ``base``; ``metrics[c][stage]`` is the
    stage's metrics dict; ``pools[c]`` the pool as ``Question`` records (absent when missing);
    ``mass[c]`` the parsed ``search.json``; ``missing`` human-readable notes on absent inputs."""

    campaign: str
    cycles: list[str]
    metrics: dict[str, dict[str, dict]] = field(default_factory=dict)
    pools: dict[str, list] = field(default_factory=dict)
    mass: dict[str, dict] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    heldout: dict[str, dict[str, int]] = field(default_factory=dict)

    def heldout_p_vs_base(self, cycle: str) -> float | None:
        """Exact McNemar p-value of the cycle's held-out outcomes against the base model's on the
        questions both were graded on (``eval/heldout.jsonl``, first sample); ``None`` without both."""
        from selfevolve.evaluation.stats import mcnemar_exact

        base, cur = self.heldout.get("base"), self.heldout.get(cycle)
        if cycle == "base" or not base or not cur:
            return None
        ids = sorted(set(base) & set(cur))
        return mcnemar_exact([base[i] for i in ids], [cur[i] for i in ids])[0] if ids else None

    def metric(self, cycle: str, stage: str, key: str) -> float | None:
        v = self.metrics.get(cycle, {}).get(stage, {}).get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def collect_campaign(root: str | Path = ".", params_path: str | Path | None = None) -> CampaignData:
    """Read the campaign under ``root`` (cycles from ``params_path``, default ``<root>/params.yaml``).
    Raises ``ParamsError`` for a missing or invalid params file; unreadable stage outputs are
    skipped and noted in ``missing``."""
    from selfevolve.config import load_params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import Question, RecordFileError, iter_json_lines, read_jsonl

    root = Path(root)
    params = load_params(Path(params_path) if params_path else root / "params.yaml")
    data = CampaignData(campaign=params.campaign, cycles=["base", *params.cycle_names()], params=params.model_dump(mode="json"))
    for c in data.cycles:
        P = cycle_paths(c, root)
        mdir = root / "metrics" / c
        data.metrics[c] = {}
        for f in sorted(mdir.glob("*.json")) if mdir.is_dir() else []:
            try:
                obj = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                data.missing.append(f"{f}: unreadable ({exc})")
                continue
            if isinstance(obj, dict):
                data.metrics[c][f.stem] = obj
        if not data.metrics[c]:
            data.missing.append(f"{mdir}: no metrics files")
        held = P.eval_dir / "heldout.jsonl"
        if held.is_file():
            try:
                data.heldout[c] = {str(r["id"]): int(bool(r["correct"][0])) for _, r in iter_json_lines(held)
                                   if r.get("id") is not None and isinstance(r.get("correct"), list) and r["correct"]}
            except (OSError, RecordFileError) as exc:
                data.missing.append(f"{held}: unreadable ({exc})")
        if P.pool.is_file():
            try:
                data.pools[c] = read_jsonl(P.pool, Question)
            except (OSError, RecordFileError) as exc:
                data.missing.append(f"{P.pool}: unreadable ({exc})")
        else:
            data.missing.append(f"{P.pool}: missing")
        if c != "base":
            search = P.mass_dir / "search.json"
            if search.is_file():
                try:
                    data.mass[c] = json.loads(search.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as exc:
                    data.missing.append(f"{search}: unreadable ({exc})")
            else:
                data.missing.append(f"{search}: missing")
    return data


# ------------------------------------------------------------------------------------------
# series (the numbers behind every plot; also the dvc plots files)
# ------------------------------------------------------------------------------------------


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

    # pool
    levels = sorted({q.level for qs in data.pools.values() for q in qs if q.level is not None})
    sources = sorted({_source_kind(q) for qs in data.pools.values() for q in qs})
    for c in data.cycles:
        if c in data.pools:
            qs = data.pools[c]
            rates = [q.meta["pass_rate"] for q in qs if isinstance(q.meta.get("pass_rate"), (int, float))]
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
                if isinstance(q.meta.get("pass_rate"), (int, float)):
                    out["pool_pass_rates"].append({"cycle": c, "step": step[c], "question_id": q.id, "level": q.level,
                                                   "source": _source_kind(q), "pass_rate": _round(float(q.meta["pass_rate"]))})
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


# ------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------


def _new_figure(ncols: int = 1, width: float = 7.5, height: float = 4.5):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), dpi=110, layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _no_data(ax, title: str, message: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, "no data\n" + message, ha="center", va="center", transform=ax.transAxes, fontsize=11,
            color="dimgray", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _cycle_axis(ax, cycles: list[str], xlabel: str = "cycle") -> None:
    ax.set_xticks(range(len(cycles)), cycles)
    ax.set_xlim(-0.5, len(cycles) - 0.5)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="y", alpha=0.3)


def _lines(ax, cycles: list[str], rows: list[dict], fields: list[tuple[str, str, dict]], annotate: bool = True) -> None:
    """One line per field (``(key, label, style)``) over the cycles; gaps where a value is None."""
    pos = {c: i for i, c in enumerate(cycles)}
    for key, label, style in fields:
        pts = [(pos[r["cycle"]], r.get(key)) for r in rows if r.get(key) is not None and r["cycle"] in pos]
        if not pts:
            continue
        xs, ys = zip(*pts)
        (line,) = ax.plot(xs, ys, marker="o", label=label, **style)
        if annotate and len(cycles) <= 8:
            for x, y in pts:
                ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8,
                            color=line.get_color())


FRACTION = (-0.02, 1.08)  # y range of plots of fractions, with room for value labels


def _finish(ax, cycles: list[str], plot_title: str, ylabel: str, ylim: tuple[float, float] | None = None, **legend) -> None:
    """Cycle x axis, y label and range, title and legend (``legend``: keyword arguments of
    ``ax.legend`` over ``loc="best", fontsize=8``)."""
    _cycle_axis(ax, cycles)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.set_title(plot_title)
    ax.legend(**{"loc": "best", "fontsize": 8, **legend})


def _plot_benchmarks(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["benchmarks"][1]
    rows = series["benchmarks"]
    keys = [k for k in (rows[0] if rows else {}) if k not in ("cycle", "step")]
    if not rows or not any(r.get(k) is not None for r in rows for k in keys):
        _no_data(ax, title, "no metrics/<cycle>/evaluate.json with benchmark scores\n(run `selfevolve evaluate --cycle C`)")
        return
    import matplotlib

    colors = matplotlib.colormaps["tab10"]
    names = []
    for k in keys:
        name = re.sub(r"_(accuracy|pass_at_\d+)$", "", k)
        if name not in names:
            names.append(name)
    fields = []
    for i, name in enumerate(names):
        color = colors(i % 10)
        fields.append((f"{name}_accuracy", f"{name} pass@1", {"color": color}))
        for k in keys:
            m = re.fullmatch(rf"{re.escape(name)}_pass_at_(\d+)", k)
            if m:
                fields.append((k, f"{name} pass@{m.group(1)}", {"color": color, "linestyle": "--"}))
    _lines(ax, data.cycles, rows, fields)
    _finish(ax, data.cycles, title, "score (fraction of questions)", FRACTION)


def _plot_pool_size(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["pool_size"][1]
    rows = series["pool"]
    if not rows:
        _no_data(ax, title, "no data/cycles/<cycle>/pool.jsonl and no pool_size in metrics/<cycle>/rewards.json")
        return
    pos = {c: i for i, c in enumerate(data.cycles)}
    sources = sorted({k[: -len("_questions")] for r in rows for k in r if k.endswith("_questions")})
    bottoms = {r["cycle"]: 0 for r in rows}
    import matplotlib

    colors = matplotlib.colormaps["Set2"]
    for i, s in enumerate(sources):
        xs, hs, bs = [], [], []
        for r in rows:
            v = r.get(f"{s}_questions")
            if isinstance(v, (int, float)) and v:
                xs.append(pos[r["cycle"]])
                hs.append(v)
                bs.append(bottoms[r["cycle"]])
                bottoms[r["cycle"]] += v
        if xs:
            ax.bar(xs, hs, bottom=bs, label=f"{s} questions", color=colors(i % 8), width=0.6)
    for r in rows:
        other = r["pool_size"] - bottoms[r["cycle"]]
        if other > 0:  # sizes known only from metrics (no per-source split)
            ax.bar([pos[r["cycle"]]], [other], bottom=[bottoms[r["cycle"]]], color="lightgray", width=0.6,
                   label="source unknown" if "source unknown" not in ax.get_legend_handles_labels()[1] else None)
        ax.annotate(str(r["pool_size"]), (pos[r["cycle"]], r["pool_size"]), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=9)
    _cycle_axis(ax, data.cycles)
    ax.set_ylabel("questions in the pool")
    ax.set_title(title)
    ax.margins(y=0.12)
    ax.legend(loc="upper left", fontsize=8)


def _plot_pool_levels(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["pool_levels"][1]
    rows = [r for r in series["pool_levels"] if r["level"] != "unknown"]
    if not rows:
        _no_data(ax, title, "no pool questions with a difficulty level\n(data/cycles/<cycle>/pool.jsonl 'level')")
        return
    import matplotlib

    pos = {c: i for i, c in enumerate(data.cycles)}
    levels = sorted({r["level"] for r in rows})
    cmap = matplotlib.colormaps["viridis"]
    bottoms: dict[str, float] = {}
    for i, lv in enumerate(levels):
        sel = [r for r in rows if r["level"] == lv]
        xs = [pos[r["cycle"]] for r in sel]
        hs = [r["fraction"] for r in sel]
        bs = [bottoms.get(r["cycle"], 0.0) for r in sel]
        ax.bar(xs, hs, bottom=bs, width=0.6, color=cmap(i / max(1, len(levels) - 1)), label=f"level {lv}")
        for r in sel:
            bottoms[r["cycle"]] = bottoms.get(r["cycle"], 0.0) + r["fraction"]
    unknown = [r for r in series["pool_levels"] if r["level"] == "unknown"]
    if unknown:
        ax.bar([pos[r["cycle"]] for r in unknown], [r["fraction"] for r in unknown],
               bottom=[bottoms.get(r["cycle"], 0.0) for r in unknown], width=0.6, color="lightgray", label="no level")
    _finish(ax, data.cycles, title, "fraction of the pool", (0, 1.0), loc="center left", bbox_to_anchor=(1.0, 0.5),
            title="difficulty")


def _plot_pool_pass_rate(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["pool_pass_rate"][1]
    rows = series["pool_pass_rates"]
    if not rows:
        _no_data(ax, title, "no pool question has a measured Solver pass rate\n(meta.pass_rate, written by the rewards stage)")
        return
    by_cycle = {c: [r["pass_rate"] for r in rows if r["cycle"] == c] for c in data.cycles}
    xs = [i for i, c in enumerate(data.cycles) if by_cycle[c]]
    vals = [by_cycle[data.cycles[i]] for i in xs]
    ax.boxplot(vals, positions=xs, widths=0.5, showmeans=True, meanprops={"marker": "D", "markerfacecolor": "tab:red",
                                                                         "markeredgecolor": "tab:red", "markersize": 5})
    for x, v in zip(xs, vals):
        ax.annotate(f"n={len(v)}\nmean {fmean(v):.2f}", (x, 1.02), ha="center", va="bottom", fontsize=8, annotation_clip=False)
    for i, c in enumerate(data.cycles):
        if not by_cycle[c]:
            ax.annotate("not measured", (i, 0.5), ha="center", fontsize=8, color="dimgray", rotation=90)
    _cycle_axis(ax, data.cycles)
    ax.set_ylim(-0.05, 1.2)
    ax.set_ylabel("Solver pass rate per question")
    ax.set_title(title)
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], color="tab:orange", label="median"),
                       Line2D([], [], marker="D", linestyle="", color="tab:red", label="mean")], loc="lower right", fontsize=8)


def _plot_critic(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["critic"][1]
    rows = series["critic"]
    if not rows:
        _no_data(ax, title, "no metrics/<cycle>/critic_questions.json or critic_plans.json")
        return
    _lines(ax, data.cycles, rows, [("critic_question_pass_rate", "questions passing the quality gate (s_q >= alpha, valid spec)", {}),
                                   ("critic_plan_pass_rate", "plans passing the plan gate (s_p >= beta)", {})])
    _finish(ax, data.cycles, title, "pass rate", FRACTION)


def _plot_rewards(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["rewards"][1]
    rows = series["rewards"]
    if not rows:
        _no_data(ax, title, "no reward_<role> in metrics/<cycle>/rewards.json")
        return
    _lines(ax, data.cycles, rows, [(f"reward_{r}", r, {}) for r in ROLES])
    _finish(ax, data.cycles, title, "mean reward", FRACTION, title="role")


def _plot_mass(axes, data: CampaignData, series: dict) -> None:
    ax, ax_h = axes
    title = FIGURES["mass"][1]
    rows = series["mass"]
    domains = sorted({k[: -len("_champion_fitness")] for r in rows for k in r if k.endswith("_champion_fitness") and r[k] is not None})
    if not domains:
        reason = "MASS disabled (mass.enabled = false)" if any((data.mass.get(c) or {}).get("enabled") is False for c in data.cycles) \
            else "no data/cycles/<cycle>/mass/search.json\nand no mass_<domain>_fitness in metrics/<cycle>/mass_search.json"
        _no_data(ax, title, reason)
    else:
        import matplotlib

        colors = matplotlib.colormaps["tab10"]
        fields = []
        for i, d in enumerate(domains):
            fields.append((f"{d}_champion_fitness", f"{d}: champion", {"color": colors(i)}))
            fields.append((f"{d}_single_agent_fitness", f"{d}: single agent (reference)", {"color": colors(i), "linestyle": ":"}))
        _lines(ax, data.cycles, rows, fields)
        _finish(ax, data.cycles, title, "fitness (mean verified score on the search sample)")
    hist = series["mass_history"]
    if not hist:
        _no_data(ax_h, "MASS search progress within each cycle", "no search history in data/cycles/<cycle>/mass/search.json")
        return
    for c in data.cycles:
        for d in sorted({h["domain"] for h in hist if h["cycle"] == c}):
            pts = sorted((h["generation"], h["champion_fitness"]) for h in hist if h["cycle"] == c and h["domain"] == d)
            ax_h.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{c} ({d})")
    ax_h.set_xlabel("generation")
    ax_h.set_ylabel("champion fitness")
    ax_h.set_title("MASS search progress within each cycle")
    ax_h.grid(True, alpha=0.3)
    ax_h.xaxis.get_major_locator().set_params(integer=True)
    ax_h.legend(loc="best", fontsize=8)


def render_figures(data: CampaignData, series: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write every figure of ``FIGURES`` into ``out_dir`` (PNG). Returns name -> path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plotters = {"benchmarks": _plot_benchmarks, "pool_size": _plot_pool_size, "pool_levels": _plot_pool_levels,
                "pool_pass_rate": _plot_pool_pass_rate, "critic": _plot_critic, "rewards": _plot_rewards}
    paths: dict[str, Path] = {}
    for name, (fname, _title) in FIGURES.items():
        if name == "mass":
            fig, axes = _new_figure(ncols=2, width=6.5)
            _plot_mass(axes, data, series)
        else:
            fig, (ax,) = _new_figure(width=8.5 if name == "pool_levels" else 7.5)
            plotters[name](ax, data, series)
        fig.suptitle(f"campaign {data.campaign}", fontsize=9, color="dimgray")
        path = out_dir / fname
        fig.savefig(path)
        paths[name] = path
    return paths


# ------------------------------------------------------------------------------------------
# markdown
# ------------------------------------------------------------------------------------------

_CAPTIONS = {
    "benchmarks": "Score of each cycle's model (base = the starting model) on every benchmark of `evaluation.benchmarks`: "
                  "solid = pass@1 (greedy when k = 1), dashed = pass@k (unbiased estimator, Chen et al. 2021). "
                  "Per-item results: `data/cycles/<cycle>/eval/<benchmark>.jsonl`.",
    "pool_size": "Questions in the pool after each cycle, by source (seed set, gated and de-duplicated Challenger questions).",
    "pool_levels": "Share of the pool at each difficulty level (1 = easiest): a curriculum that gets harder shifts upwards.",
    "pool_pass_rate": "Distribution of the Solver's measured pass rate on the pool's questions (the latest measurement of "
                      "each question, `sage.solver_samples` samples; box = quartiles): lower = harder for the Solver.",
    "critic": "Fraction of Challenger questions passing the quality gate and of plans passing the plan gate.",
    "rewards": "Mean SAGE reward of each role's rollouts in the cycle (r_c, r_p, r_s, r_cr).",
    "mass": "Left: fitness of the MASS champion design per domain (dotted: the single-agent reference). "
            "Right: champion fitness over the generations of each cycle's search.",
}


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _table(data: CampaignData, series: dict) -> str:
    bench_keys = [k for k in (series["benchmarks"][0] if series["benchmarks"] else {}) if k not in ("cycle", "step")]
    by = {name: {r["cycle"]: r for r in rows} for name, rows in series.items() if name in ("benchmarks", "pool", "mass")}
    mass_keys = [k for k in (series["mass"][0] if series["mass"] else {}) if k.endswith("_champion_fitness")]
    cols: list[tuple[str, Any]] = [("cycle", lambda c: c)]
    for k in bench_keys:
        label = re.sub(r"_accuracy$", " pass@1", k)
        label = re.sub(r"_pass_at_(\d+)$", r" pass@\1", label)
        cols.append((label, lambda c, k=k: by["benchmarks"].get(c, {}).get(k)))
    if data.heldout:
        cols.append(("held-out p vs base", data.heldout_p_vs_base))
    if any(data.metric(c, "evaluate", "mass_champion_accuracy") is not None for c in data.cycles):
        cols += [("MASS champion held-out", lambda c: data.metric(c, "evaluate", "mass_champion_accuracy")),
                 ("single agent held-out", lambda c: data.metric(c, "evaluate", "mass_single_agent_accuracy")),
                 ("champion acc/1k tok", lambda c: data.metric(c, "evaluate", "mass_champion_accuracy_per_1k_tokens")),
                 ("single acc/1k tok", lambda c: data.metric(c, "evaluate", "mass_single_agent_accuracy_per_1k_tokens"))]
    cols += [
        ("pool", lambda c: by["pool"].get(c, {}).get("pool_size")),
        ("+pool", lambda c: data.metric(c, "rewards", "pool_growth")),
        ("pool pass rate", lambda c: by["pool"].get(c, {}).get("mean_pass_rate")),
        ("q gate pass", lambda c: data.metric(c, "critic_questions", "critic_question_pass_rate")),
        ("plan gate pass", lambda c: data.metric(c, "critic_plans", "critic_plan_pass_rate")),
        ("solver acc", lambda c: data.metric(c, "verify", "solver_accuracy")),
        *[(f"r_{r[:4]}", lambda c, r=r: data.metric(c, "rewards", f"reward_{r}")) for r in ROLES],
        ("RL best val", lambda c: data.metric(c, "train_rl", "best_val_accuracy")),
    ]
    for k in mass_keys:
        cols.append((f"MASS {k[: -len('_champion_fitness')]} fitness", lambda c, k=k: by["mass"].get(c, {}).get(k)))
    lines = ["| " + " | ".join(name for name, _ in cols) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"]
    for c in data.cycles:
        lines.append("| " + " | ".join(_fmt(get(c)) for _, get in cols) + " |")
    return "\n".join(lines)


def write_markdown(data: CampaignData, series: dict, figures: dict[str, Path], series_files: dict[str, Path],
                   out_dir: str | Path) -> Path:
    """Write ``out_dir/report.md`` (per-cycle table, each figure with its caption, data files,
    missing inputs). Links are relative to ``out_dir``. Returns the path."""
    out_dir = Path(out_dir)
    parts = [
        f"# Campaign report: {data.campaign}",
        "",
        f"Cycles: {', '.join(data.cycles)} (`base` is the starting model; each cycle starts from the previous one). "
        "Generated by `selfevolve report` from `metrics/<cycle>/*.json`, `data/cycles/<cycle>/pool.jsonl` and "
        "`data/cycles/<cycle>/mass/search.json`.",
        "",
        "## Per-cycle summary",
        "",
        _table(data, series),
        "",
        "Columns: benchmark pass@1/pass@k (evaluate), exact McNemar p-value of the held-out outcomes against the base model "
        "(paired on the same questions; claim a change only at p < 0.05), the cycle's MASS champion and the single agent on "
        "held-out questions with the cycle's model (accuracy and accuracy per 1,000 output tokens), pool size and growth and mean Solver pass rate (rewards), critic gate pass "
        "rates, Solver accuracy on the cycle's solve set (verify), mean reward per role, best RL validation accuracy (train_rl), "
        "MASS champion fitness (mass_search).",
        "",
    ]
    for name, path in figures.items():
        title = FIGURES[name][1]
        parts += [f"## {title}", "", f"![{title}]({path.name})", "", _CAPTIONS[name], ""]
    parts += ["## Data files", "", "Series behind the plots (JSON lists of rows; `step` 0 = base), readable by `dvc plots`:", ""]
    parts += [f"- [`{p.name}`]({p.name})" for p in series_files.values()]
    parts.append("")
    if data.missing:
        parts += ["## Missing data", ""] + [f"- {m}" for m in data.missing] + [""]
    path = out_dir / "report.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# entry point
# ------------------------------------------------------------------------------------------


def _log_to_mlflow(data: CampaignData, series: dict, files: list[Path], root: Path) -> str:
    """Log the report as the nested run ``campaign/report`` (replaced on re-runs): the files as
    artifacts under ``report/`` and every numeric series value as a metric with ``step`` = cycle
    index (MASS fields prefixed ``mass.``). Returns the run id."""
    import shutil
    import tempfile
    import time

    from mlflow.entities import Metric

    from selfevolve.tracking import stage_run

    ts = int(time.time() * 1000)
    metrics = []
    for name in ("benchmarks", "pool", "critic", "rewards", "mass"):
        for r in series[name]:
            for k, v in r.items():
                if k not in ("cycle", "step") and isinstance(v, (int, float)) and not isinstance(v, bool):
                    metrics.append(Metric(f"mass.{k}" if name == "mass" else k, float(v), ts, int(r["step"])))
    with stage_run(data.campaign, "campaign", "report", data.params, root) as run, tempfile.TemporaryDirectory() as tmp:
        for f in files:  # one upload of exactly these files (out_dir may hold others)
            shutil.copy2(f, Path(tmp) / f.name)
        run.log_artifact(tmp, artifact_path="report")
        for i in range(0, len(metrics), 1000):  # MLflow's log_batch limit
            run.client.log_batch(run.run_id, metrics=metrics[i:i + 1000])
        return run.run_id


def build_report(root: str | Path = ".", out_dir: str | Path | None = None, params_path: str | Path | None = None,
                 track: bool = True) -> dict:
    """Collect, plot, write and (``track``) log the campaign report (see the module docstring).

    Returns ``{"report": Path of report.md, "figures": {name: Path}, "series": {name: Path},
    "missing": [notes], "run_id": MLflow run id or None}``. Raises ``ParamsError`` for a missing or
    invalid params file."""
    root = Path(root)
    out_dir = Path(out_dir) if out_dir is not None else root / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    data = collect_campaign(root, params_path)
    series = compute_series(data)
    from selfevolve.records import write_json

    series_files: dict[str, Path] = {}
    for name in SERIES:
        path = out_dir / f"{name}.json"
        write_json(path, series[name])
        series_files[name] = path
    figures = render_figures(data, series, out_dir)
    report = write_markdown(data, series, figures, series_files, out_dir)
    run_id = None
    if track:
        run_id = _log_to_mlflow(data, series, [report, *figures.values(), *series_files.values()], root)
    log.info("report for campaign %s (%s): %s, %d figures", data.campaign, ", ".join(data.cycles), report, len(figures))
    return {"report": report, "figures": figures, "series": series_files, "missing": data.missing, "run_id": run_id}
