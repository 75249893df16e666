"""The cycle flow: every stage of one cycle, in the registry's DAG order."""

from __future__ import annotations

from prefect import flow

from tasks import stages


@flow(name="cycle", log_prints=True)
def cycle(name: str, root: str = str(stages.ROOT)) -> str:
    """Run cycle ``name`` (a key of params.yaml ``cycles``): the stages of
    ``selfevolve.stages.registry.CYCLE_STAGES`` (challenge -> ... -> evaluate)."""
    for t in stages.CYCLE_TASKS:
        t(cycle=name, root=root)
    return name
