"""The cycle flow: every stage of one cycle, in DAG order, placed as ``params.yaml`` ``placement`` says.
The campaign flow runs it as a subflow per cycle (``base`` first) when its stages run here."""

from __future__ import annotations

from prefect import flow

from selfevolve.config import Params
from selfevolve.stages.placement import StageRun

from tasks.repro import ROOT
from tasks.dispatch import run_stages


@flow(name="cycle", log_prints=True, flow_run_name="cycle {name}")
def cycle(name: str, root: str = str(ROOT)) -> str:
    """Run cycle ``name``: ``base`` (the seed set, warm start and its evaluation) or a key of
    params.yaml ``cycles`` (the stages of ``selfevolve.stages.registry.CYCLE_STAGES``, challenge ->
    ... -> evaluate, a sharded stage as its shards and merge). The cycle it starts from must be
    finished. Raises ``KeyError`` naming the defined cycles for another name."""
    from selfevolve.config import load_params

    params = load_params(f"{root}/params.yaml")
    run_stages(cycle_runs(params, name), params, root)
    return name


def cycle_runs(params: Params, name: str) -> list[StageRun]:
    """The stage runs of cycle ``name`` (``base`` or a key of params.yaml ``cycles``) in DAG order;
    over ``base`` and the cycles in order they are the campaign's ``stage_runs``. Raises
    ``KeyError`` naming the defined cycles for another name."""
    from selfevolve.stages.placement import stage_runs

    if name != "base":
        params.cycle_index(name)  # KeyError naming the defined cycles
    return [r for r in stage_runs(params, [] if name == "base" else [name]) if r.cycle == name]
