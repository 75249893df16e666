"""The campaign flow: seed set and base model, then ``cycles`` cycles, each starting from the
previous cycle's model, then a summary. Run it directly (``python -m flows.campaign --cycles 2``)
or through the deployment (``prefect deployment run 'campaign/campaign' -p cycles=2``). Where the
stages run is ``params.yaml`` ``placement`` (``tasks.dispatch``): here, one after another, or on the
workers of each stage's work pool."""

from __future__ import annotations

import argparse
import signal

from prefect import flow, get_run_logger

from flows.cycle import cycle
from tasks import campaign as campaign_tasks
from tasks.repro import ROOT
from tasks.dispatch import run_stages


def run_name() -> str:
    """The flow run's name: the campaign (params.yaml) and the cycles it runs, e.g. ``tiny-arith: base..c2``."""
    from prefect.runtime import flow_run

    from selfevolve.config import load_params

    p = flow_run.parameters or {}
    params = load_params(f"{p.get('root', ROOT)}/params.yaml")
    names = params.cycle_names()
    n = len(names) if p.get("cycles") is None else int(p["cycles"])
    return f"{params.campaign}: base..{names[n - 1]}" if n >= 1 else params.campaign


@flow(name="campaign", log_prints=True, flow_run_name=run_name)
def campaign(cycles: int | None = None, root: str = str(ROOT), commit_lock: bool = True) -> dict:
    """Run the first ``cycles`` cycles of params.yaml (default: all of them), each as a ``cycle``
    subflow (``base`` first) when the stages run here (``placement.dispatch: local``), as one graph
    of stage tasks when they run on work pools; then the report. With ``commit_lock``, commit
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
    if params.placement.dispatch == "local":
        for name in ["base", *names[:cycles]]:  # one after another anyway: a subflow per cycle
            cycle(name, root=root)
    else:  # stages of a cycle overlap with the next cycle's on the workers: one graph
        run_stages(stage_runs(params, names[:cycles]), params, root)
    campaign_tasks.report(root=root)
    if commit_lock:
        campaign_tasks.commit_lock(f"campaign: dvc.lock after {', '.join(['base', *names[:cycles]])}", root=root)
    summary = campaign_summary(root, names[:cycles])
    get_run_logger().info("campaign finished:\n%s", summary["table"])
    publish_summary(params.campaign, root, summary["rows"])
    return summary


def publish_summary(campaign: str, root: str, rows: list[dict]) -> None:
    """The campaign's headline table as the flow run's markdown artifact (key ``<campaign>-summary``),
    with where to look next: the report and the MLflow cycles view (``selfevolve ui``)."""
    from prefect.artifacts import create_markdown_artifact

    from selfevolve.orchestration.services import summary_artifact_key
    from selfevolve.reporting.summary import markdown

    links = {"report": f"{root}/reports/report.md",
             "the cycles in MLflow": "`selfevolve ui` (or `make ui`) prints the link to the cycles view; "
                                     f"registered model `{campaign}`, alias `champion`",
             "DVC": "`dvc metrics show reports/headline`, `dvc plots show`"}
    create_markdown_artifact(markdown=f"# Campaign {campaign}\n\n" + markdown(rows, links), key=summary_artifact_key(campaign),
                             description=f"headline metrics per cycle of campaign {campaign}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def handle_stop_signals() -> None:
    """SIGTERM (e.g. `kill` of `make run`) and SIGINT unwind like Ctrl-C, so the running stage's
    process group is stopped (tasks.repro.run_logged) instead of being left behind as an orphan.
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
