"""The cycle flow: every stage of one cycle, in DAG order, placed as ``params.yaml`` ``placement`` says."""

from __future__ import annotations

from prefect import flow

from tasks import stages
from tasks.dispatch import run_stages


@flow(name="cycle", log_prints=True, flow_run_name="cycle {name}")
def cycle(name: str, root: str = str(stages.ROOT)) -> str:
    """Run cycle ``name`` (a key of params.yaml ``cycles``): the stages of
    ``selfevolve.stages.registry.CYCLE_STAGES`` (challenge -> ... -> evaluate), a sharded stage as
    its shards and merge. The cycle it starts from must be finished."""
    from selfevolve.config import load_params
    from selfevolve.stages.placement import stage_runs

    params = load_params(f"{root}/params.yaml")
    params.cycle_index(name)  # KeyError naming the defined cycles
    run_stages([r for r in stage_runs(params, [name]) if r.cycle == name], params, root)
    return name
