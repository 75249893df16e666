"""Stage commands (``selfevolve <stage> [--cycle C]``, one per registered stage: what ``dvc.yaml``
runs) and the campaign commands (``summary``, ``stack``, ``preset``, ``dvc-yaml``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import typer

from selfevolve.cli.common import fail, input_errors, load_params_or_fail, setup_logging
from selfevolve.stages.registry import STAGES, Stage


def run_stage_or_fail(stage: Stage, cycle: Optional[str], params: Path, overlay: Optional[list[Path]], root: Path,
                      track: bool, shard: Optional[str] = None, merge: int = 0, verbose: bool = False) -> dict:
    """Run ``stage`` as the runner does; bad params, an unknown cycle, a per-cycle stage without
    ``--cycle`` or a bad ``--shard``/``--merge`` exit 2 with the reason before anything is written,
    and so does bad input the stage meets (a seeds or questions file, a model folder:
    ``selfevolve.inputs.InputError``; traceback only with ``verbose``)."""
    from selfevolve.stages.runner import execute, warn_defaults_left_out
    from selfevolve.stages.shards import Shard

    p = load_params_or_fail(params, overlay)
    warn_defaults_left_out(params, p)
    from selfevolve.stages.placement import RAN_MARKER_ENV, RESTORE_ONLY_ENV

    restoring = os.environ.get(RESTORE_ONLY_ENV)
    if restoring:  # set by the campaign flow while it restores a worker's result (tasks/dispatch.py)
        fail(f"stage {restoring} was about to be recomputed while restoring a worker's result: its run-cache entry is "
             "not on the DVC remote (did the worker push it? do the flow and the worker share the default remote?)")
    if marker := os.environ.get(RAN_MARKER_ENV):  # the flow learns that DVC ran this command (tasks/repro.py)
        Path(marker).write_text(stage.name + (f"@{cycle}" if cycle else ""), encoding="utf-8")
    if stage.per_cycle:
        if not cycle:
            fail(f"stage '{stage.name}' runs per cycle: give --cycle (one of {p.cycle_names()})")
        if cycle not in p.cycles:
            fail(f"unknown cycle {cycle!r}; params.yaml defines {p.cycle_names()}")
    if (shard or merge) and not stage.shardable:
        fail(f"stage '{stage.name}' cannot be sharded (--shard/--merge apply to the rollout and grading stages)")
    if shard and merge:
        fail("give --shard K/N (compute one shard) or --merge N (join N shards), not both")
    try:
        part = Shard.parse(shard) if shard else None
    except ValueError as exc:
        fail(str(exc))
    with input_errors(verbose):
        return execute(stage, p, cycle, root, track=track, shard=part, merge=merge)


def stage_command(stage: Stage) -> Callable[..., None]:
    """The typer command of one stage, documented by the stage function's docstring."""

    def command(
        cycle: Optional[str] = typer.Option(None, "--cycle", "-c", help="cycle name from params.yaml 'cycles' (per-cycle stages)"),
        params: Path = typer.Option(Path("params.yaml"), "--params", "-p", help="params file (validated before anything runs)"),
        overlay: Optional[list[Path]] = typer.Option(None, "--params-overlay", help="preset params files merged over --params"),
        root: Path = typer.Option(Path("."), "--root", help="project root holding data/, models/, mlflow/"),
        no_track: bool = typer.Option(False, "--no-track", help="do not log to MLflow"),
        shard: Optional[str] = typer.Option(None, "--shard", help="rollout/grading stages: compute shard K/N only (written "
                                            "beside the output under shards/)"),
        merge: int = typer.Option(0, "--merge", min=0, help="rollout/grading stages: join the N shard parts into the output"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
    ) -> None:
        setup_logging(verbose)
        run_stage_or_fail(stage, cycle, params, overlay, root, track=not no_track, shard=shard, merge=merge, verbose=verbose)

    doc = (stage.run.__doc__ or "").strip()
    command.__doc__ = f"Stage '{stage.name}'{' of one cycle' if stage.per_cycle else ''}. " + doc
    return command


def stage_commands() -> list[tuple[str, Callable[..., None]]]:
    """(command name, function) per registered stage, except the evaluate stages: ``selfevolve
    evaluate`` runs those (``--cycle``) besides ad-hoc evaluation of any model."""
    return [(s.cli_name, stage_command(s)) for s in STAGES if s.cli_name != "evaluate"]


def summary(root: Path = typer.Option(Path("."), "--root", help="project root")) -> None:
    """Print the per-cycle summary table of a campaign (held-out accuracy, pool, critic pass rates,
    rewards per role, RL and MASS results) from the metrics files."""
    from selfevolve.reporting.summary import campaign_summary

    s = campaign_summary(root)
    typer.echo(s["table"])
    typer.echo(s["next"])


def stack(
    root: Path = typer.Option(Path("."), "--root", help="project root (prefect.yaml, mlflow/)"),
    prefect_port: int = typer.Option(4200, help="Prefect server port on 127.0.0.1"),
    mlflow_port: int = typer.Option(5000, help="MLflow server port on 127.0.0.1"),
) -> None:
    """Start a local Prefect server, the 'cpu' and 'gpu' process work pools with every deployment of
    prefect.yaml, a 'cpu' worker, and an MLflow tracking server, all on 127.0.0.1. Runs until
    Ctrl-C, then stops them by PID. Submit runs from another shell with
    PREFECT_API_URL=http://127.0.0.1:4200/api prefect deployment run 'campaign/campaign' -p cycles=2."""
    import logging
    import signal

    from selfevolve.orchestration import services

    setup_logging()
    log = logging.getLogger("selfevolve")
    root = root.resolve()
    with services.Stack() as st:
        mlflow_url = services.start_mlflow(st, root, port=mlflow_port)
        api = services.start_prefect(st, root, port=prefect_port)
        services.deploy(st, root)
        services.start_worker(st, root, "cpu", extra_env={"MLFLOW_TRACKING_URI": mlflow_url})
        log.info("Prefect UI and API: %s (worker on pool 'cpu'); MLflow: %s", api.removesuffix("/api"), mlflow_url)
        log.info("run: PREFECT_API_URL=%s prefect deployment run 'campaign/campaign' -p cycles=2 --watch", api)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
        log.info("stopping services")


def preset(
    preset: Path = typer.Argument(..., help="a partial params file, e.g. configs/qwen2.5-7b-vllm.yaml or configs/paper-tiny.yaml"),
    params: Path = typer.Option(Path("params.yaml"), "--params", "-p", help="params file to update in place"),
) -> None:
    """Merge a preset into params.yaml (comments kept), after validating the result, so that
    `dvc repro` and the Prefect flows run with it and DVC records the values."""
    from selfevolve.config import apply_preset

    with input_errors():
        apply_preset(params, preset)
    typer.echo(f"{params} updated from {preset}")


def dvc_yaml(
    out: Path = typer.Option(Path("dvc.yaml"), "--out", "-o", help="where to write it"),
    check: bool = typer.Option(False, "--check", help="only compare: exit 1 when OUT differs from the registry"),
    params: Path = typer.Option(Path("params.yaml"), "--params", "-p", help="params file whose placement.shards split stages"),
) -> None:
    """Write dvc.yaml from the stage registry, with every stage's code dependencies derived from its
    imports, and a sharded stage (params placement.shards) as its shard stages and merge stage (run
    after adding a stage, changing what a stage imports or changing the shard counts; a test fails
    while the committed dvc.yaml is stale)."""
    from selfevolve.stages import dvc_yaml as gen
    from selfevolve.stages.placement import shard_counts

    try:
        shards = shard_counts(load_params_or_fail(params))
    except ValueError as exc:
        fail(str(exc))
    if check:
        if not gen.is_current(out, shards):
            fail(f"{out} is not what the stage registry generates: run `selfevolve dvc-yaml`", code=1)
        typer.echo(f"{out} is up to date")
        return
    gen.write(out, shards)
    typer.echo(f"wrote {out} ({sum(1 for _ in STAGES)} stages)")


def ui(
    root: Path = typer.Option(Path("."), "--root", help="project root (params.yaml, mlflow/)"),
    port: int = typer.Option(5000, help="MLflow UI port on 127.0.0.1"),
) -> None:
    """Serve the campaign's MLflow store on 127.0.0.1 and print where to compare its cycles: the
    cycle runs in the runs table, side by side, and the report's charts over the cycles. Runs until
    Ctrl-C, then stops the server."""
    import logging
    import signal

    from selfevolve.orchestration import services
    from selfevolve.tracking import campaign_urls

    setup_logging()
    log = logging.getLogger("selfevolve")
    root = root.resolve()
    params = load_params_or_fail(root / "params.yaml")
    with services.Stack() as st:
        url = services.start_mlflow(st, root, port=port)
        try:
            links = campaign_urls(url, params.campaign)
        except KeyError as exc:
            fail(str(exc.args[0]))
        for name, what in (("cycles", "the cycles (runs table)"), ("compare", "the cycles side by side"),
                           ("report", "the report's charts over the cycles")):
            if name in links:
                typer.echo(f"{what}:\n  {links[name]}")
        log.info("MLflow UI on %s (Ctrl-C stops it)", url)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})


def screenshots(
    root: Path = typer.Option(Path("."), "--root", help="project root of a finished campaign (params.yaml, mlflow/, .prefect/)"),
    out: Path = typer.Option(Path("docs/figures"), "--out", "-o", help="folder for the PNG files"),
) -> None:
    """Screenshot the campaign in the MLflow UI (the cycle runs, the cycles side by side, the report's
    charts, a trace, the registered model) and the Prefect UI (the campaign's flow run and its summary
    artifact), in headless Chromium, checking that each page
    shows what it must. Starts both servers on free ports of 127.0.0.1 over the project's stores and
    stops them after. Needs Debian's chromium and chromium-driver."""
    from selfevolve.orchestration import services
    from selfevolve.reporting.screenshots import BrowserUnavailable, browser_paths, campaign_pages, capture

    setup_logging()
    root = root.resolve()
    params = load_params_or_fail(root / "params.yaml")
    try:
        browser_paths()
    except BrowserUnavailable as exc:
        fail(str(exc))
    with services.Stack() as st:
        mlflow_url = services.start_mlflow(st, root)
        api = services.start_prefect(st, root)
        found = services.campaign_records(api, params.campaign)
        pages = capture(campaign_pages(mlflow_url, params.campaign, api.removesuffix("/api"), found["flow_run"], found["summary"]),
                        root / out)
    for p in pages:
        missing = [s for s, ok in p.found.items() if not ok]
        typer.echo(f"{root / out / (p.name + '.png')}" + (f"  (did not show: {missing})" if missing else ""))
