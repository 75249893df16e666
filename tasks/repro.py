"""The Prefect task that runs a stage here: it reproduces the DVC stage with ``dvc repro
--single-item``, so a run through Prefect leaves ``dvc.lock`` and the outputs exactly as ``dvc
repro`` would, and a stage whose inputs did not change is skipped by DVC. Transient failures are
retried. (``tasks.dispatch`` sends stages to workers instead when ``placement.dispatch: pools``;
``tasks.campaign`` holds the campaign's closing tasks.)

A stage that DVC recomputed ends ``Completed``; one whose command DVC did not run (unchanged, or
its outputs restored from DVC's run cache) ends in the ``Cached`` state (type COMPLETED, as
Prefect's own cache hits), so the two look different in the Prefect UI (``outcome``).

A stage runs as a child process in its own process group; when the flow is cancelled or gets
SIGTERM/SIGINT, the whole group is stopped, so no stage keeps running behind the flow's back, and
the next run resumes from what DVC recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from selfevolve.orchestration.processes import stop_group


ROOT = Path(__file__).resolve().parents[1]


def run_logged(args: list[str], root: str | Path, what: str, env: dict | None = None) -> None:
    """Run ``args`` in ``root`` (venv on PATH, own process group, ``env`` added to this process's
    environment), streaming output to the Prefect log. Raises ``RuntimeError`` (with the last lines
    of output) on a non-zero exit; on any interruption (cancellation, SIGTERM, SIGINT) the child's
    whole process group is stopped first."""
    logger = get_run_logger()
    env = {**os.environ, **(env or {})}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    from prefect.runtime import flow_run

    from selfevolve.tracking import FLOW_RUN_ENV

    if flow_run.id:  # the stage's MLflow run and registered models name the Prefect flow run (lineage)
        env[FLOW_RUN_ENV] = str(flow_run.id)
    proc = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)
    tail: list[str] = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            line = line.rstrip()
            if line and "it/s]" not in line and "s/it]" not in line:
                logger.info(line)
            tail = (tail + [line])[-30:]
        code = proc.wait()
    except BaseException:
        stop_group(proc, 20.0)
        raise
    if code != 0:
        raise RuntimeError(f"{what} failed (exit {code}):\n" + "\n".join(tail))


def reproduce(stage_id: str, root: str | Path = ROOT, pull: bool = False, env: dict | None = None) -> bool:
    """``dvc repro --single-item <stage_id>`` in ``root`` (skipped by DVC when nothing changed); with
    ``pull``, missing dependencies and run-cache entries come from the DVC remote first. Returns
    whether DVC ran the stage's command (the command says so through ``RAN_MARKER_ENV``); False when
    DVC skipped it or restored its outputs from the run cache. Raises ``RuntimeError`` as ``run_logged``."""
    from selfevolve.stages.placement import RAN_MARKER_ENV

    args = [sys.executable, "-m", "dvc", "repro", "--single-item", stage_id] + (["--pull"] if pull else [])
    with tempfile.TemporaryDirectory(prefix="selfevolve-stage-") as tmp:
        marker = Path(tmp) / "ran"
        run_logged(args, root, f"stage {stage_id}", env={**(env or {}), RAN_MARKER_ENV: str(marker)})
        return marker.is_file()


def outcome(stage_id: str, ran: bool, data: Any = None):
    """The final Prefect state of a run of ``stage_id``: ``Completed`` when DVC ran its command
    (``ran``), else ``Completed`` named ``Cached``; ``data`` is the run's result."""
    from prefect.states import Completed

    if ran:
        return Completed(data=data, message=f"{stage_id}: recomputed (DVC ran the stage's command)")
    return Completed(data=data, name="Cached", message=f"{stage_id}: not recomputed (DVC found it unchanged or "
                     "restored its outputs from the run cache)")


@task(name="stage", retries=1, retry_delay_seconds=5, task_run_name="{stage_id}")
def stage(stage_id: str, root: str = str(ROOT)):
    """Reproduce one DVC stage (``seeds``, ``solve@c1``, ``solve_shard_0@c1``) in ``root``; the run
    ends ``Completed`` or ``Cached`` (``outcome``), its result is ``stage_id``."""
    return outcome(stage_id, reproduce(stage_id, root), stage_id)
