"""Round-over-round report of a campaign: PNG plots, a markdown report, series files for ``dvc plots``.

``build_report(root, out_dir)`` reads what the stages wrote (``collect``) (paths from ``selfevolve.paths``):

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
* ``report.md``: a per-cycle table, a written conclusion per cycle (``conclusions``) and every
  figure with a caption;
* series files (JSON lists of row objects, ``step`` 0 = base, 1.. = cycles) that ``dvc plots`` can
  read: ``benchmarks.json``, ``pool.json``, ``pool_levels.json``, ``pool_pass_rates.json``,
  ``critic.json``, ``rewards.json``, ``mass.json``, ``mass_history.json``.

With ``track=True`` the report is logged to MLflow as the nested run ``campaign/report`` of the
campaign's experiment (``selfevolve.tracking.stage_run``: a re-run replaces it), with the files as
artifacts under ``report/`` and each numeric series as metrics with ``step`` = cycle index; then
each cycle's headline metrics go on its cycle run and its model into the Model Registry
(``selfevolve.model_registry.publish_cycles``).
Nothing here raises for missing or malformed stage outputs (they are listed under "Missing data");
a missing or invalid params file raises ``ParamsError``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from selfevolve.paths import reports_dir
from selfevolve.reporting.collect import CampaignData, collect_campaign
from selfevolve.reporting.conclusions import conclusions
from selfevolve.reporting.figures import FIGURES, render_figures
from selfevolve.reporting.series import PLOTS_PAGE, ROLES, SERIES, compute_series, write_plots_page

log = logging.getLogger("selfevolve")

__all__ = ["build_report", "write_markdown"]



_CAPTIONS = {
    "frontier": "Greedy held-out accuracy of each cycle's model on the frontier forms (one step beyond the warm start, never "
                "trained on) and on the seed forms the warm start learned (retention). Under each value: the exact McNemar "
                "p-value against the base model (`heldout_<split>_p_vs_base`, also in the table).",
    "forms": "Held-out accuracy per question form (`a+b`: an a-digit plus a b-digit number) per cycle: where the gains "
             "are, and what is still out of reach.",
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
    """A table cell: tiny values (p-values) in scientific notation, other floats to 3 places."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if 0 < abs(v) < 0.001:
            return f"{v:.2g}"
        return f"{v:.3f}"
    return str(v)


def _count(v: float | None) -> int | None:
    return None if v is None else int(v)


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
    for split, ref in (("frontier", "base"), ("seed", "base"), ("rungs", "prev")):
        key = f"heldout_{split}_p_vs_{ref}"
        if any(data.metric(c, "evaluate", key) is not None for c in data.cycles):
            cols.append((f"{split} p vs {'base' if ref == 'base' else 'previous'}", lambda c, k=key: data.metric(c, "evaluate", k)))
    if any(data.metric(c, "datasets", "self_labels") is not None for c in data.cycles):
        cols.append(("self-labels", lambda c: _count(data.metric(c, "datasets", "self_labels"))))
    if any(data.metric(c, "evaluate", "mass_champion_accuracy") is not None for c in data.cycles):
        cols += [("MASS champion held-out", lambda c: data.metric(c, "evaluate", "mass_champion_accuracy")),
                 ("single agent held-out", lambda c: data.metric(c, "evaluate", "mass_single_agent_accuracy")),
                 ("champion acc/1k tok", lambda c: data.metric(c, "evaluate", "mass_champion_accuracy_per_1k_tokens")),
                 ("single acc/1k tok", lambda c: data.metric(c, "evaluate", "mass_single_agent_accuracy_per_1k_tokens"))]
    cols += [
        ("pool", lambda c: by["pool"].get(c, {}).get("pool_size")),
        ("+pool", lambda c: _count(data.metric(c, "rewards", "pool_growth"))),
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
    """Write ``out_dir/report.md`` (per-cycle table, conclusions, each figure with its caption, data files,
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
    if found := conclusions(data):
        parts += ["## Conclusions per cycle", ""] + [f"- **{c}**: {text}" for c, text in found.items()] + [""]
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


def _write_headline_files(root: Path, cycles: list[str], folder: Path) -> list[Path]:
    """``<folder>/<cycle>.json``: each cycle's headline metrics for ``dvc metrics show reports/headline``
    (``selfevolve.headline.dvc_row``); a cycle without them gets no file (an old one is removed)."""
    from selfevolve import headline
    from selfevolve.paths import cycle_paths
    from selfevolve.records import write_json

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for c in cycles:
        row, path = headline.dvc_row(headline.read(cycle_paths(c, root).metrics_dir)), folder / f"{c}.json"
        if row:
            write_json(path, row)
            files.append(path)
        else:
            path.unlink(missing_ok=True)
    return files


def build_report(root: str | Path = ".", out_dir: str | Path | None = None, params_path: str | Path | None = None,
                 track: bool = True) -> dict:
    """Collect, plot, write and (``track``) log the campaign report (see the module docstring).

    Returns ``{"report": Path of report.md, "figures": {name: Path}, "series": {name: Path},
    "missing": [notes], "run_id": MLflow run id or None}``. Raises ``ParamsError`` for a missing or
    invalid params file."""
    root = Path(root)
    out_dir = Path(out_dir) if out_dir is not None else reports_dir(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = collect_campaign(root, params_path)
    series = compute_series(data)
    from selfevolve.records import write_json

    series_files: dict[str, Path] = {}
    for name in SERIES:
        path = out_dir / f"{name}.json"
        write_json(path, series[name])
        series_files[name] = path
    _write_headline_files(root, data.cycles, out_dir / "headline")
    write_plots_page(root / PLOTS_PAGE)
    figures = render_figures(data, series, out_dir)
    report = write_markdown(data, series, figures, series_files, out_dir)
    run_id = None
    if track:
        run_id = _log_to_mlflow(data, series, [report, *figures.values(), *series_files.values()], root)
        from selfevolve.model_registry import publish_cycles

        inits = {c: str((v or {}).get("init", "")) for c, v in (data.params.get("cycles") or {}).items()}
        publish_cycles(data.campaign, root, data.cycles[1:], inits)
    log.info("report for campaign %s (%s): %s, %d figures", data.campaign, ", ".join(data.cycles), report, len(figures))
    return {"report": report, "figures": figures, "series": series_files, "missing": data.missing, "run_id": run_id}
