"""Stage entry points on the command line (`selfevolve <stage> [--cycle C]`) and campaign commands (summary, stack).

This is what ``dvc.yaml`` runs and what the Prefect tasks reproduce (through ``dvc repro``).
Every stage run: loads and validates params (nothing is written if they are invalid), opens
its MLflow run (nested under the cycle's parent run), runs, writes its metrics to
``metrics/<cycle>/<stage>.json`` and logs them, plus its small outputs as artifacts.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Optional

import typer

from selfevolve.cli import app, fail

# stage name -> (module, function name, takes a cycle, output files logged as artifacts)
STAGES: dict[str, tuple[str, str, bool, tuple[str, ...]]] = {
    "seeds": ("selfevolve.stages.base", "seeds", False, ()),
    "bootstrap": ("selfevolve.stages.base", "bootstrap", False, ()),
    "challenge": ("selfevolve.stages.sage", "challenge", True, ("challenge",)),
    "critic_questions": ("selfevolve.stages.sage", "critic_questions", True, ("critic_questions",)),
    "plan": ("selfevolve.stages.sage", "plan", True, ("plans",)),
    "critic_plans": ("selfevolve.stages.sage", "critic_plans", True, ("critic_plans",)),
    "solve": ("selfevolve.stages.sage", "solve", True, ()),
    "verify": ("selfevolve.stages.sage", "verify", True, ()),
    "rewards": ("selfevolve.stages.sage", "rewards", True, ("pool",)),
    "mass_search": ("selfevolve.stages.train", "mass_search", True, ("mass_dir",)),
    "datasets": ("selfevolve.stages.train", "datasets", True, ()),
    "train_rl": ("selfevolve.stages.train", "train_rl", True, ()),
    "train_sft": ("selfevolve.stages.train", "train_sft", True, ("model",)),
    "evaluate": ("selfevolve.stages.train", "evaluate", True, ()),
}
CYCLE_STAGES = [s for s, v in STAGES.items() if v[2]]

log = logging.getLogger("selfevolve")


def setup_logging(verbose: bool = False) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(rich_tracebacks=False, show_path=False)], force=True)
    for noisy in ("httpx", "urllib3", "mlflow", "alembic", "filelock", "git", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def load_params_or_exit(params_path: Path, overlays: list[Path] | None):
    from selfevolve.config import ParamsError, load_params

    try:
        return load_params(params_path, overlays=[str(o) for o in overlays or []])
    except ParamsError as exc:
        fail(str(exc))


MAX_ARTIFACT_BYTES = 500_000_000


def log_output(run, path: Path, name: str) -> None:
    """Log a stage output to its MLflow run: files and folders up to ``MAX_ARTIFACT_BYTES`` as
    artifacts (the cycle's model under ``model/``, others under ``outputs/`` and folders under
    ``outputs/<folder>/``); larger ones (a 7B
    checkpoint) as a ``<name>.json`` pointer with the local path and size."""
    if not path.exists():
        return
    size = path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    if size > MAX_ARTIFACT_BYTES:
        run.log_dict({"path": str(path.resolve()), "bytes": size}, f"outputs/{name}.json")
    else:
        run.log_artifact(path, artifact_path="model" if name == "model" else ("outputs" if path.is_file() else f"outputs/{path.name}"))


def run_stage(stage: str, cycle: str | None, params_path: Path = Path("params.yaml"), overlays: list[Path] | None = None,
              root: Path = Path("."), track: bool = True) -> dict:
    """Run one stage (for ``cycle`` when it is a per-cycle stage) with tracking and metrics.

    Returns the stage's metrics. Raises ``KeyError`` for an unknown stage or cycle.
    """
    import importlib

    from selfevolve.paths import cycle_paths
    from selfevolve.records import write_json
    from selfevolve.tracking import stage_run

    module, func, per_cycle, artifacts = STAGES[stage]
    params = load_params_or_exit(params_path, overlays)
    if per_cycle:
        if cycle is None:
            fail(f"stage '{stage}' needs --cycle (one of {params.cycle_names()})")
        if cycle != "base" or stage != "evaluate":
            try:
                params.cycle_index(cycle)
            except KeyError as exc:
                fail(str(exc.args[0]))
    label = cycle if per_cycle else "base"
    fn: Callable = getattr(importlib.import_module(module), func)
    t0 = time.time()
    log.info("stage %s%s started", stage, f" (cycle {cycle})" if per_cycle else "")
    args = (params, cycle, root) if per_cycle else (params, root)
    if not track:
        metrics = fn(*args)
    else:
        with stage_run(params.campaign, label, stage, params.model_dump(mode="json"), root) as run:
            if stage == "train_rl":
                metrics = fn(*args, on_step=lambda step, m: run.log_metrics(m, step=step))
            else:
                metrics = fn(*args)
            metrics = {**metrics, "stage_seconds": round(time.time() - t0, 2)}
            run.log_metrics(metrics, step=params.cycle_index(cycle) if per_cycle and cycle != "base" else 0, parent=True)
            paths = cycle_paths(label, root)
            for name in artifacts:
                log_output(run, getattr(paths, name), name)
    metrics = {**metrics, "stage_seconds": round(time.time() - t0, 2)}
    write_json(cycle_paths(label, root).metrics(stage) if per_cycle else Path(root) / "metrics" / "base" / f"{stage}.json", metrics)
    log.info("stage %s done in %.1f s: %s", stage, time.time() - t0,
             ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(metrics.items())[:8]))
    return metrics


def _register(stage: str) -> None:
    module, func, per_cycle, _ = STAGES[stage]

    def command(
        cycle: Optional[str] = typer.Option(None, "--cycle", "-c", help="cycle name from params.yaml 'cycles' (per-cycle stages)"),
        params: Path = typer.Option(Path("params.yaml"), "--params", "-p", help="params file (validated before anything runs)"),
        overlay: Optional[list[Path]] = typer.Option(None, "--params-overlay", help="preset params files merged over --params"),
        root: Path = typer.Option(Path("."), "--root", help="project root holding data/, models/, mlflow/"),
        no_track: bool = typer.Option(False, "--no-track", help="do not log to MLflow"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
    ) -> None:
        setup_logging(verbose)
        run_stage(stage, cycle, params, overlay, root, track=not no_track)

    import importlib

    doc = (getattr(importlib.import_module(module), func).__doc__ or "").strip()
    command.__doc__ = f"Stage '{stage}'{' of one cycle' if per_cycle else ''}. " + doc
    app.command(stage.replace("_", "-"), rich_help_panel="Stages")(command)


# `evaluate` has its own command (selfevolve.evaluation.cli): the stage with --cycle, or ad-hoc
# evaluation of any model on named benchmarks.
for _s in STAGES:
    if _s != "evaluate":
        _register(_s)


@app.command("summary")
def summary_command(root: Path = typer.Option(Path("."), "--root", help="project root")) -> None:
    """Print the per-cycle summary table of a campaign (held-out accuracy, pool, critic pass rates,
    rewards per role, RL and MASS results) from the metrics files."""
    from selfevolve.summary import campaign_summary

    s = campaign_summary(root)
    typer.echo(s["table"])
    typer.echo(s["next"])


@app.command("stack")
def stack_command(
    root: Path = typer.Option(Path("."), "--root", help="project root (prefect.yaml, mlflow/)"),
    prefect_port: int = typer.Option(4200, help="Prefect server port on 127.0.0.1"),
    mlflow_port: int = typer.Option(5000, help="MLflow server port on 127.0.0.1"),
) -> None:
    """Start a local Prefect server, the 'cpu' and 'gpu' process work pools with every deployment of
    prefect.yaml, a 'cpu' worker, and an MLflow tracking server, all on 127.0.0.1. Runs until
    Ctrl-C, then stops them by PID. Submit runs from another shell with
    PREFECT_API_URL=http://127.0.0.1:4200/api prefect deployment run 'campaign/campaign' -p cycles=2."""
    import signal as _signal

    from selfevolve import services

    setup_logging()
    root = root.resolve()
    with services.Stack() as stack:
        mlflow_url = services.start_mlflow(stack, root, port=mlflow_port)
        api = services.start_prefect(stack, root, port=prefect_port)
        services.deploy(stack, root)
        services.start_worker(stack, root, "cpu", extra_env={"MLFLOW_TRACKING_URI": mlflow_url})
        log.info("Prefect UI and API: %s (worker on pool 'cpu'); MLflow: %s", api.removesuffix("/api"), mlflow_url)
        log.info("run: PREFECT_API_URL=%s prefect deployment run 'campaign/campaign' -p cycles=2 --watch", api)
        _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT, _signal.SIGTERM})
        _signal.sigwait({_signal.SIGINT, _signal.SIGTERM})
        log.info("stopping services")


@app.command("preset")
def preset_command(
    preset: Path = typer.Argument(..., help="a partial params file, e.g. configs/qwen2.5-7b-vllm.yaml or configs/paper-tiny.yaml"),
    params: Path = typer.Option(Path("params.yaml"), "--params", "-p", help="params file to update in place"),
) -> None:
    """Merge a preset into params.yaml (comments kept), after validating the result, so that
    `dvc repro` and the Prefect flows run with it and DVC records the values."""
    from selfevolve.config import ParamsError, apply_preset

    try:
        apply_preset(params, preset)
    except ParamsError as exc:
        fail(str(exc))
    typer.echo(f"{params} updated from {preset}")
