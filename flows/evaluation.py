"""The evaluation flow: held-out evaluation of the base model and of chosen cycles, then the report."""

from __future__ import annotations

from prefect import flow

from tasks import stages


@flow(name="evaluation", log_prints=True)
def evaluation(cycles: list[str] | None = None, root: str = str(stages.ROOT)) -> list[str]:
    """Evaluate the base model and each cycle in ``cycles`` (all of params.yaml when None)."""
    from selfevolve.config import load_params

    names = cycles or load_params(f"{root}/params.yaml").cycle_names()
    stages.TASKS["evaluate_base"](root=root)
    for c in names:
        stages.TASKS["evaluate"](cycle=c, root=root)
    stages.report(root=root)
    return names
