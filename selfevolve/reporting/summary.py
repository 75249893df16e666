"""End-of-campaign summary: one row per cycle from the DVC metrics files, and where to look next."""

from __future__ import annotations

import json
from pathlib import Path

from selfevolve.paths import cycle_paths

COLUMNS = [
    ("frontier", "evaluate", "heldout_frontier_accuracy"),
    ("p", "evaluate", "heldout_frontier_p_vs_base"),
    ("beyond", "evaluate", "heldout_beyond_accuracy"),
    ("reach50", "evaluate", "heldout_reach_50"),
    ("seed forms", "evaluate", "heldout_seed_accuracy"),
    ("heldout acc", "evaluate", "heldout_accuracy"),
    ("pool", "rewards", "pool_size"),
    ("+pool", "rewards", "pool_growth"),
    ("q pass", "critic_questions", "critic_question_pass_rate"),
    ("plan pass", "critic_plans", "critic_plan_pass_rate"),
    ("solver acc", "verify", "solver_accuracy"),
    ("r_chal", "rewards", "reward_challenger"),
    ("r_plan", "rewards", "reward_planner"),
    ("r_solv", "rewards", "reward_solver"),
    ("r_crit", "rewards", "reward_critic"),
    ("labels", "datasets", "self_labels"),
    ("val", "train_rl", "best_val_accuracy"),
    ("mass fit", "mass_search", "mass_math_fitness"),
    ("mass champ", "evaluate", "mass_champion_accuracy"),
    ("single", "evaluate", "mass_single_agent_accuracy"),
]

# The base cycle has no rewards stage: its pool is the seed set.
BASE_SOURCES = {"pool": ("seeds", "seed_questions")}


def _metric(root: Path, cycle: str, stage: str, key: str):
    p = cycle_paths(cycle, root).metrics(stage)
    try:
        return json.loads(p.read_text()).get(key)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def campaign_summary(root: str | Path = ".", cycles: list[str] | None = None) -> dict:
    """Returns ``rows`` (per cycle, ``base`` first), ``table`` (rendered text) and ``next`` (hints)."""
    from rich.console import Console
    from rich.table import Table

    root = Path(root)
    if cycles is None:
        from selfevolve.config import load_params

        cycles = load_params(root / "params.yaml").cycle_names()
    rows = []
    for c in ["base", *cycles]:
        row = {"cycle": c, **{name: _metric(root, c, stage, key) for name, stage, key in COLUMNS}}
        if c == "base":
            row.update({name: _metric(root, c, stage, key) for name, (stage, key) in BASE_SOURCES.items()})
        rows.append(row)
    table = Table(title="Campaign summary (per cycle)")
    table.add_column("cycle")
    for name, _, _ in COLUMNS:
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(r["cycle"], *("-" if r[n] is None else (f"{r[n]:.3f}" if isinstance(r[n], float) else str(r[n])) for n, _, _ in COLUMNS))
    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    console.print(table)
    text = console.export_text()
    hints = ("Next: `make ui` (MLflow UI on http://127.0.0.1:5000), `dvc metrics show`, `dvc plots show`, "
             "`selfevolve report` (plots + markdown).")
    return {"rows": rows, "table": text, "next": hints}
