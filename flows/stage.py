"""The stage flow: one DVC stage on a worker (``tasks.worker.run_stage``). The campaign flow sends
each stage to the deployment ``stage/<pool>`` of its work pool when ``placement.dispatch: pools``;
the worker runs it in its own checkout (``SELFEVOLVE_ROOT``)."""

from __future__ import annotations

import os

from prefect import flow, get_run_logger

from tasks.repro import ROOT


@flow(name="stage", log_prints=True)  # the run is named by the dispatcher: <stage id>#<attempt>
def stage(stage_id: str, commit: str, lock: str = "", deps: list[str] | None = None, tracking_uri: str | None = None):
    """Reproduce ``stage_id`` at ``commit`` with the flow's ``lock`` (dvc.lock text), pulling ``deps``
    from the DVC remote and pushing the outputs and run-cache back. The run ends ``Completed`` when
    the worker recomputed the stage, ``Cached`` when DVC restored it (``tasks.repro.outcome``); its
    result is ``tasks.worker.run_stage``'s dict. Raises
    ``selfevolve.orchestration.services.ServiceUnreachable`` naming the DVC remote or tracking server it cannot
    reach, ``tasks.worker.WorkerError`` for a commit it cannot find, ``RuntimeError`` when a DVC step fails."""
    from tasks.repro import outcome
    from tasks.worker import run_stage

    root = os.environ.get("SELFEVOLVE_ROOT", str(ROOT))
    out = run_stage(root, stage_id, commit, lock, deps or [], tracking_uri)
    get_run_logger().info("stage %s done on %s in %s", stage_id, out["host"], out["checkout"])
    return outcome(stage_id, out["recomputed"], out)
