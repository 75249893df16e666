"""The campaign's headline metrics: the few numbers per cycle that tell its story, with readable
names, the metrics file each comes from, and how to print it. The one list that the MLflow cycle
runs (``headline/<name>``), the registered model versions' tags, ``selfevolve summary``, the DVC
headline metrics file (``metrics/headline.json``) and the report's conclusions use.

Kinds: ``accuracy`` (a fraction in [0, 1]), ``p`` (an exact McNemar p-value against the base model,
or against the model the cycle started from where the name says "previous": printed in scientific
notation below 0.001, never rounded to 0), ``digits`` (a length in operand
digits), ``count`` (a number of items), ``flag`` (1 = yes, 0 = no).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Headline:
    """One headline metric: ``name`` (readable, an MLflow metric name), ``short`` (a column header:
    at most 8 characters a line, two lines at most), ``stage`` / ``key`` (``metrics/<cycle>/<stage>.json`` field)
    and ``kind`` (module docstring)."""

    name: str
    short: str
    stage: str
    key: str
    kind: str
    dvc: str | None = None  # its field in the DVC headline file (``dvc_row``); None: not there


HEADLINE: tuple[Headline, ...] = (
    Headline("frontier accuracy", "frontier", "evaluate", "heldout_frontier_accuracy", "accuracy", "frontier"),
    Headline("frontier p vs base", "frontier\np", "evaluate", "heldout_frontier_p_vs_base", "p", "p_frontier"),
    Headline("seed accuracy", "seed", "evaluate", "heldout_seed_accuracy", "accuracy", "seed"),
    Headline("seed p vs base", "seed\np", "evaluate", "heldout_seed_p_vs_base", "p"),
    Headline("beyond accuracy", "beyond", "evaluate", "heldout_beyond_accuracy", "accuracy", "beyond"),
    Headline("rungs p vs previous", "rungs p\nvs prev", "evaluate", "heldout_rungs_p_vs_prev", "p"),
    Headline("reach 50", "reach\n50%", "evaluate", "heldout_reach_50", "digits", "reach50"),
    Headline("reach 90", "reach\n90%", "evaluate", "heldout_reach_90", "digits", "reach90"),
    Headline("self-labels", "self-\nlabels", "datasets", "self_labels", "count"),
    Headline("pool growth", "pool\ngrowth", "rewards", "pool_growth", "count"),
    Headline("rl kept", "kept\nRL", "train_rl", "best_step", "flag"),
    Headline("sft kept", "kept\nSFT", "train_sft", "sft_kept", "flag"),
)
BY_NAME = {h.name: h for h in HEADLINE}
#: The metric that ranks the cycles' models (the ``champion`` alias goes to the best).
RANKING = "frontier accuracy"


def fmt(value: float | int | None, kind: str) -> str:
    """``value`` as a person reads it: ``-`` when missing; p-values as ``0.23`` or ``2.7e-19``
    (never ``0.000``); accuracies to 3 places; counts, digits and flags as integers."""
    if value is None:
        return "-"
    if kind == "p":
        return f"{value:.2g}" if value < 0.001 else f"{value:.3f}".rstrip("0").rstrip(".") if value < 1 else "1"
    if kind == "accuracy":
        return f"{value:.3f}"
    if kind == "flag":
        return "yes" if value else "no"
    return str(int(value))


def shown(value: float, kind: str) -> float:
    """``value`` as a metric to show in a table cell: a p-value rounded to two significant digits
    (``2.7e-19``; MLflow's runs table prints ``2.72109334e-19`` cut to ``2.72109334…``, losing the
    exponent), anything else unchanged. The exact p-values stay in ``metrics/<cycle>/evaluate.json``
    and on the evaluate run."""
    return float(fmt(value, kind)) if kind == "p" else value


def dvc_row(metrics: dict[str, float]) -> dict[str, float | str]:
    """One cycle's line of the DVC headline file (``reports/headline/<cycle>.json``): the headline
    metrics that have a ``dvc`` field, under it, few enough that ``dvc metrics show`` of the
    folder fits 100 columns; p-values as text (``2.7e-19``: DVC would round the number to 0.0)."""
    out: dict[str, float | str] = {}
    for h in HEADLINE:
        if h.dvc and h.name in metrics:
            v = metrics[h.name]
            out[h.dvc] = fmt(v, h.kind) if h.kind == "p" else (round(v, 4) if h.kind == "accuracy" else int(v))
    return out


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read(metrics_dir: str | Path) -> dict[str, float]:
    """The headline metrics of one cycle from its metrics folder (``metrics/<cycle>/``), by readable
    name (``values``). Never raises for missing or malformed files."""
    by_stage: dict[str, dict] = {}
    for stage in {h.stage for h in HEADLINE}:
        try:
            obj = json.loads((Path(metrics_dir) / f"{stage}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            obj = {}
        by_stage[stage] = obj if isinstance(obj, dict) else {}
    return values(by_stage)


def values(by_stage: dict[str, dict]) -> dict[str, float]:
    """The headline metrics of one cycle, by readable name, from its stages' metrics dicts
    (``by_stage[stage]``: ``metrics/<cycle>/<stage>.json``); a metric whose stage or field is
    missing (or not a number) is left out. ``rl kept`` is 1 when training kept a checkpoint past
    its starting model (``best_step`` > 0)."""
    out: dict[str, float] = {}
    for h in HEADLINE:
        v = _number((by_stage.get(h.stage) or {}).get(h.key))
        if v is None:
            continue
        out[h.name] = float(v > 0) if h.name == "rl kept" else v
    return out
