"""The cycle flow: every stage of one cycle, in DAG order."""

from __future__ import annotations

from prefect import flow

from tasks import stages


@flow(name="cycle", log_prints=True)
def cycle(name: str, root: str = str(stages.ROOT)) -> str:
    """Run cycle ``name`` (a key of params.yaml ``cycles``): challenge -> critic_questions -> plan ->
    critic_plans -> solve -> verify -> rewards -> mass_search -> datasets -> train_rl -> train_sft ->
    evaluate."""
    for t in stages.CYCLE_TASKS:
        t(cycle=name, root=root)
    return name
