"""Which DVC stage runs a campaign consists of, what each needs and makes, and where it runs.

One list, derived from the stage registry and ``params.yaml``: the base stages, then each cycle's
stages in DAG order, a sharded stage (``placement.shards``) expanded into its shard runs and its
merge run. ``dvc.yaml`` (``selfevolve.stages.dvc_yaml``) and the campaign flow's dispatch
(``tasks.dispatch``) both read it, so the stage addresses the flow sends to workers are the
stages DVC knows.

Placement (README "Running on a cluster"): each run has a resource class, the registry's
(``gpu`` for the stages that generate with or train the model, ``cpu`` for the rest), unless
``placement.resources`` overrides it; a ``gpu`` stage whose backend needs no local GPU (the
``openai`` backend, or ``model.device: cpu``) goes to the ``cpu`` class. ``placement.pools`` maps
the class to a Prefect work pool. A merge run only concatenates files: ``cpu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from selfevolve.config import Params
from selfevolve.paths import CyclePaths
from selfevolve.stages.registry import STAGES, Stage
from selfevolve.stages.shards import Shard, all_parts, shard_name


#: Set by the campaign flow while it restores a worker's result from the run-cache: a stage command
#: that finds it refuses to compute (the result must come from the remote, not be made twice).
RESTORE_ONLY_ENV = "SELFEVOLVE_RESTORE_ONLY"
#: Set by the flow around ``dvc repro`` to a file path: a stage command that finds it writes its
#: stage's name there before computing, so the flow tells a stage DVC recomputed from one it
#: skipped (unchanged) or restored from its run cache (``tasks.repro.reproduce``).
RAN_MARKER_ENV = "SELFEVOLVE_RAN_MARKER"


@dataclass(frozen=True)
class StageRun:
    """One DVC stage of the campaign: ``id`` is its address (``seeds``, ``solve@c1``,
    ``solve_shard_0@c1``); ``deps``/``outs`` are its data files relative to the project root (code
    dependencies are not listed here); ``upstream`` the ids of the runs that make its deps."""

    id: str
    stage: Stage
    cycle: str
    shard: Shard | None = None
    merge: int = 0
    deps: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    upstream: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        """The ``dvc.yaml`` entry name: the stage's, or ``<stage>_shard_K`` for a shard."""
        return shard_name(self.stage.name, self.shard)


def _resolve(spec: str, cycle: str, init: str) -> str:
    which, attr = spec.split(".", 1)
    return getattr(CyclePaths(Path("."), {"cycle": cycle, "init": init, "base": "base"}[which]), attr).as_posix()


def _maker(made_by: dict[str, str], path: str) -> str | None:
    """The run whose output is ``path`` or a folder holding it."""
    p = Path(path)
    for cand in (p, *p.parents):
        if cand.as_posix() in made_by:
            return made_by[cand.as_posix()]
    return None


def expand(stage: Stage, shards: int) -> list[tuple[Shard | None, int]]:
    """``(shard, merge)`` of each run of ``stage`` with ``shards`` shards: ``[(None, 0)]`` unsharded,
    else the N shard runs then the merge run ``(None, N)``."""
    if shards <= 1 or not stage.shardable:
        return [(None, 0)]
    return [(Shard(k, shards), 0) for k in range(shards)] + [(None, shards)]


def shard_counts(params: Params) -> dict[str, int]:
    """Stage name -> shard count, for the shardable stages with more than one shard. Raises
    ``ValueError`` for a stage in ``placement.shards`` that cannot be sharded."""
    out = {}
    for name, n in params.placement.shards.items():
        stage = next((s for s in STAGES if s.name == name), None)
        if stage is None or not stage.shardable:
            raise ValueError(f"placement.shards: stage {name!r} cannot be sharded (shardable: "
                             f"{[s.name for s in STAGES if s.shardable]})")
        if n > 1:
            out[name] = n
    return out


def stage_runs(params: Params, cycles: list[str] | None = None) -> list[StageRun]:
    """Every DVC stage run of the base stages and of ``cycles`` (default: all of params.yaml), in an
    order that respects the DAG, each with its upstream runs."""
    shards = shard_counts(params)
    names = params.cycle_names() if cycles is None else cycles
    runs: list[StageRun] = []
    made_by: dict[str, str] = {}
    for cycle in ["base", *names]:
        init = "base" if cycle == "base" else params.cycles[cycle].init
        for stage in STAGES:
            if stage.per_cycle == (cycle == "base"):
                continue
            deps = [_resolve(d, cycle, init) for d in stage.deps]
            outs = [_resolve(o, cycle, init) for o in stage.outs]
            for shard, merge in expand(stage, shards.get(stage.name, 1)):
                rid = shard_name(stage.name, shard) + (f"@{cycle}" if stage.per_cycle else "")
                r_deps = all_parts(outs, merge) if merge else deps
                r_outs = shard.parts(outs) if shard else outs
                upstream = sorted({maker for d in r_deps if (maker := _maker(made_by, d))})
                runs.append(StageRun(rid, stage, cycle, shard, merge, tuple(r_deps), tuple(r_outs), tuple(upstream)))
                for o in r_outs:
                    made_by[o] = rid
    return runs


def needs_gpu(params: Params) -> bool:
    """Whether the model stages need a GPU where they run: not with the ``openai`` backend (the
    model is served elsewhere) or ``model.device: cpu``."""
    return params.model.backend != "openai" and params.model.device != "cpu"


def resource_class(run: StageRun, params: Params) -> str:
    """``gpu`` or ``cpu`` for ``run`` (see the module docstring)."""
    override = params.placement.resources.get(run.stage.name)
    if override:
        return override
    if run.merge or (run.stage.resource == "gpu" and not needs_gpu(params)):
        return "cpu"
    return run.stage.resource


def pool_of(run: StageRun, params: Params) -> str:
    """The Prefect work pool ``run`` is sent to."""
    cls = resource_class(run, params)
    return params.placement.pools.get(cls, cls)  # type: ignore[call-overload]


def check_resources(params: Params) -> None:
    """Raises ``ValueError`` naming a ``placement.resources`` key that is no stage."""
    unknown = set(params.placement.resources) - {s.name for s in STAGES}
    if unknown:
        raise ValueError(f"placement.resources: unknown stage(s) {sorted(unknown)}; the stages are {[s.name for s in STAGES]}")
