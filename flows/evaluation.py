"""The evaluation flow: held-out evaluation of the base model and of chosen cycles, then the report."""

from __future__ import annotations

from prefect import flow

from tasks import campaign as campaign_tasks
from tasks.repro import ROOT
from tasks.dispatch import run_stages


@flow(name="evaluation", log_prints=True)
def evaluation(cycles: list[str] | None = None, root: str = str(ROOT)) -> list[str]:
    """Evaluate the base model and each cycle in ``cycles`` (all of params.yaml when None); their
    models must exist (run the cycles first)."""
    from selfevolve.config import load_params
    from selfevolve.stages.placement import stage_runs

    params = load_params(f"{root}/params.yaml")
    names = cycles or params.cycle_names()
    runs = [r for r in stage_runs(params, names) if r.stage.name in ("evaluate_base", "evaluate")]
    run_stages(runs, params, root)
    campaign_tasks.report(root=root)
    return names
