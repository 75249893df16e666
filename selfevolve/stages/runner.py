"""Run one stage the way ``dvc.yaml`` and the Prefect tasks do: validated params, a ``StageContext``,
the stage's MLflow run (nested under its cycle's parent run), its metrics file.

``run_stage`` raises instead of exiting (the CLI turns errors into messages and exit codes):
``ParamsError`` for bad params (nothing is written), ``KeyError`` for an unknown stage or cycle,
``ValueError`` for a per-cycle stage without a cycle, and whatever the stage raises.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import yaml
from pydantic import BaseModel

from selfevolve.config import Params, load_params
from selfevolve.records import write_json
from selfevolve.stages.context import StageContext
from selfevolve.stages.registry import Stage, get
from selfevolve.stages.shards import Shard, shard_name

log = logging.getLogger("selfevolve")

def log_output(run, path: Path, name: str) -> None:
    """Log a stage output to its MLflow run: files and folders up to
    ``selfevolve.tracking.MAX_ARTIFACT_BYTES`` as artifacts (files under ``outputs/``, folders
    under ``outputs/<folder>/``); larger ones as a ``<name>.json`` pointer with the local path and
    size. (Models are not stage outputs here: each cycle's kept model is registered with the
    report, ``selfevolve.model_registry``.)"""
    from selfevolve.tracking import MAX_ARTIFACT_BYTES

    if not path.exists():
        return
    size = path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    if size > MAX_ARTIFACT_BYTES:
        run.log_dict({"path": str(path.resolve()), "bytes": size}, f"outputs/{name}.json")
    else:
        run.log_artifact(path, artifact_path="outputs" if path.is_file() else f"outputs/{path.name}")


def _summary(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(metrics.items())[:8])


def execute(stage: Stage, params: Params, cycle: str | None = None, root: str | Path = ".", track: bool = True,
            shard: Shard | None = None, merge: int = 0) -> dict:
    """Run ``stage`` for ``cycle`` with already validated ``params``: tracking (unless ``track`` is
    false), ``stage_seconds``, and the metrics file ``metrics/<cycle>/<stage>.json``. Returns the
    metrics. A shard run (``shard``) is tracked and measured as ``<stage>_shard_K``; the merge run
    (``merge`` = N) as the stage itself."""
    from selfevolve.tracking import stage_run

    cycle = stage.cycle_of(cycle)
    ctx = StageContext(params, cycle, Path(root), shard=shard, merge=merge)
    name, metrics_file = shard_name(stage.name, shard), shard_name(stage.metrics_file, shard)
    t0 = time.time()
    log.info("stage %s%s started", name, f" (cycle {cycle})" if stage.per_cycle else "")
    if track:
        with stage_run(params.campaign, cycle, name, params.model_dump(mode="json"), root) as run:
            ctx.log_step = lambda step, m: run.log_metrics(m, step=step, background=True)
            ctx.log_traces = run.log_traces
            metrics = stage.run(ctx)
            if shard is None:  # the cycle's run gathers every stage's metrics (a shard's are partial)
                run.log_metrics(metrics, step=ctx.index, parent=True)
            metrics = {**metrics, "stage_seconds": round(time.time() - t0, 2)}
            run.log_metrics({"stage_seconds": metrics["stage_seconds"]})
            for art in stage.artifacts if shard is None else ():
                log_output(run, getattr(ctx.paths, art), art)
    else:
        metrics = {**stage.run(ctx), "stage_seconds": round(time.time() - t0, 2)}
    write_json(ctx.paths.metrics(metrics_file), metrics)
    log.info("stage %s done in %.1f s: %s", name, time.time() - t0, _summary(metrics))
    return metrics


def run_stage(name: str, cycle: str | None = None, params_path: str | Path = "params.yaml",
              overlays: list[str | Path] | None = None, root: str | Path = ".", track: bool = True) -> dict:
    """Load and validate ``params_path`` (+ ``overlays``), then :func:`execute` the stage ``name``
    (a registry name such as ``challenge`` or ``evaluate_base``). Returns the stage's metrics."""
    stage = get(name)
    params = load_params(params_path, overlays=[str(o) for o in overlays or []])
    warn_defaults_left_out(params_path, params)
    return execute(stage, params, cycle, root, track)


def warn_defaults_left_out(params_path: str | Path, params: Params) -> list[str]:
    """Log a warning naming the fields the params file leaves to the schema's defaults
    (:func:`defaults_left_out`) and return them: DVC tracks the values a stage reads in the file
    only, so a later change of such a default would not rerun the stages that read it."""
    left_out = defaults_left_out(yaml.safe_load(Path(params_path).read_text(encoding="utf-8")) or {}, params)
    if left_out:
        log.warning("%s leaves %d field(s) to the schema's defaults (%s): DVC tracks only what the file holds, so a "
                    "later change of those defaults will not rerun the stages that read them; write them into the file",
                    params_path, len(left_out), ", ".join(left_out[:5]) + (", ..." if len(left_out) > 5 else ""))
    return left_out


def defaults_left_out(written: dict, params: Params) -> list[str]:
    """The dotted fields of ``params`` that the params file as written (``written``, its YAML
    mapping) does not hold, i.e. that took the schema's default; a section's own fields are
    looked at, a mapping-valued field (``cycles``, ``placement.shards``) is one field."""
    out: list[str] = []

    def walk(node: BaseModel, data: dict, prefix: str) -> None:
        for field in type(node).model_fields:
            value = getattr(node, field)
            if field not in data:
                out.append(prefix + field)
            elif isinstance(value, BaseModel) and isinstance(data[field], dict):
                walk(value, data[field], f"{prefix}{field}.")

    walk(params, written if isinstance(written, dict) else {}, "")
    return out
