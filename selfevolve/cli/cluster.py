"""``selfevolve deploy`` and ``selfevolve worker``: the two commands that put a campaign on several
machines (README "Running on a cluster")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from selfevolve.cli.common import fail, setup_logging


def deploy(
    root: Path = typer.Option(Path("."), "--root", help="project checkout holding prefect.yaml"),
    zombie_after: float = typer.Option(90.0, min=31.0, help="seconds without a heartbeat after which a flow run is marked "
                                       "Crashed and its stage resubmitted (flow runs beat every 30 s)"),
) -> None:
    """Register the cluster on the Prefect server at PREFECT_API_URL: the process work pools 'cpu',
    'gpu' and 'head', every deployment of prefect.yaml (among them stage/cpu and stage/gpu, to which
    the campaign sends stages, and campaign/cluster), and the automation that marks a flow run
    Crashed when its worker machine stops sending heartbeats. Idempotent."""
    from selfevolve.orchestration import services

    setup_logging()
    if not os.environ.get("PREFECT_API_URL"):
        fail("set PREFECT_API_URL=http://HOST:4200/api (the Prefect server every machine reaches)")
    try:
        services.deploy(None, root.resolve(), zombie_after_s=zombie_after)
    except RuntimeError as exc:
        fail(str(exc))
    typer.echo(f"pools {', '.join(services.POOLS)}, deployments and zombie detection registered at {os.environ['PREFECT_API_URL']}")


def worker(
    pool: str = typer.Option(..., "--pool", help="work pool to poll: 'gpu' for the model stages, 'cpu' for grading and the rest, "
                             "'head' for the campaign flow itself"),
    root: Path = typer.Option(Path("."), "--root", help="this machine's clone of the project (its own clone per worker)"),
    limit: Optional[int] = typer.Option(None, min=1, help="flow runs at once (default: 1 on stage pools, one stage per "
                                        "checkout; unlimited on 'head')"),
    name: Optional[str] = typer.Option(None, help="worker name shown in the Prefect UI"),
) -> None:
    """Start a Prefect process worker for POOL that runs each stage sent to it in this checkout:
    check out the campaign's commit, pull the stage's inputs from the default DVC remote, reproduce
    it, push the outputs and run-cache, log to the MLflow server. Checks first that PREFECT_API_URL,
    MLFLOW_TRACKING_URI and the DVC remote are reachable from here, and exits 2 naming the one that
    is not. Runs until stopped (Ctrl-C)."""
    from selfevolve.orchestration import services

    setup_logging()
    root = root.resolve()
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        fail("set PREFECT_API_URL=http://HOST:4200/api (the campaign's Prefect server)")
    try:
        services.wait_http(f"{api.rstrip('/')}/health", timeout_s=10)
    except RuntimeError:
        fail(f"cannot reach the Prefect server {api}")
    if pool != "head":
        try:
            services.check_tracking_server(os.environ.get("MLFLOW_TRACKING_URI"))
            services.check_dvc_remote(root)
        except services.ServiceUnreachable as exc:
            fail(str(exc))
    env = services.quiet_env({"SELFEVOLVE_ROOT": str(root)})  # as every service process: OpenMP wait defaults, venv on PATH
    args = services.worker_args(pool, limit or (None if pool == "head" else 1), name)
    typer.echo(f"worker for pool {pool!r} in {root} (Ctrl-C stops it)")
    os.chdir(root)
    os.execve(args[0], args, env)
