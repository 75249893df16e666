"""The campaign flow: seed set and base model, then ``cycles`` cycles, each starting from the
previous cycle's model, then a summary. Run it directly (``python -m flows.campaign --cycles 2``)
or through the deployment (``prefect deployment run 'campaign/campaign' -p cycles=2``). Where the
stages run is ``params.yaml`` ``placement`` (``tasks.dispatch``): here, one after another, or on the
workers of each stage's work pool."""

from __future__ import annotations

import argparse
import signal

from prefect import flow, get_run_logger

from tasks import stages
from tasks.dispatch import run_stages


@flow(name="campaign", log_prints=True)
def campaign(cycles: int | None = None, root: str = str(stages.ROOT), commit_lock: bool = True) -> dict:
    """Run the first ``cycles`` cycles of params.yaml (default: all of them), then the report; with ``commit_lock``, commit
    ``dvc.lock`` (the record of what was made) to the project's git repository, so that it travels
    with the outputs pushed to the DVC remote (``make push``). Raises ``ValueError`` if params.yaml
    defines fewer cycles (add them under ``cycles:``, each with ``init`` = the previous one)."""
    from selfevolve.config import load_params
    from selfevolve.reporting.summary import campaign_summary
    from selfevolve.stages.placement import stage_runs

    params = load_params(f"{root}/params.yaml")
    names = params.cycle_names()
    cycles = len(names) if cycles is None else cycles
    if cycles < 1 or cycles > len(names):
        raise ValueError(f"cycles={cycles}, but params.yaml defines {len(names)} cycles {names}; add more under 'cycles:'")
    run_stages(stage_runs(params, names[:cycles]), params, root)
    stages.report(root=root)
    if commit_lock:
        stages.commit_lock(f"campaign: dvc.lock after {', '.join(['base', *names[:cycles]])}", root=root)
    summary = campaign_summary(root, names[:cycles])
    get_run_logger().info("campaign finished:\n%s", summary["table"])
    return summary


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def handle_stop_signals() -> None:
    """SIGTERM (e.g. `kill` of `make run`) and SIGINT unwind like Ctrl-C, so the running stage's
    process group is stopped (tasks.stages.run_logged) instead of being left behind as an orphan.
    SIGINT is set explicitly because a process started in the background by a non-interactive
    shell inherits it ignored."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def main() -> None:
    ap = argparse.ArgumentParser(description="Run a self-evolution campaign through Prefect (a temporary local API "
                                 "server is started unless PREFECT_API_URL points at one).")
    ap.add_argument("--cycles", type=int, default=None, help="how many cycles of params.yaml to run (default: all)")
    args = ap.parse_args()
    handle_stop_signals()
    summary = campaign(cycles=args.cycles)  # the flow logs the summary table
    print(summary["next"])


if __name__ == "__main__":
    main()
