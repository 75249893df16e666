"""What a worker does with one stage the campaign flow sent it (``flows/stage.py``).

The worker's checkout is its own clone of the project. For each stage it:

1. checks that it reaches the DVC remote and the MLflow tracking server (a clear error naming the
   one it cannot reach, before anything runs);
2. checks out the campaign's commit (fetching it from ``origin`` when it is new) and writes the
   flow's ``dvc.lock``, so the code, params and the record of every finished stage are the flow's;
3. pulls the stage's input data from the remote (``dvc pull --force``: a file left by an earlier
   stage run is replaced by the version the lock names);
4. reproduces the stage (``dvc repro --single-item --pull``: a result already in the remote's
   run-cache is restored, not recomputed);
5. pushes the outputs and the run-cache, from which the flow restores the result.

One stage at a time per checkout: start each worker with ``--limit 1`` and run several workers (each
in its own clone) for concurrency.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from selfevolve.orchestration.git import GitError, git
from selfevolve.orchestration.services import check_dvc_remote, check_tracking_server
from tasks.repro import reproduce, run_logged


class WorkerError(RuntimeError):
    """The worker cannot run the stage (the commit cannot be found, or a git step failed)."""


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return git(root, *args, check=check)
    except GitError as exc:
        raise WorkerError(str(exc)) from exc


def checkout(root: Path, commit: str, lock: str) -> None:
    """Check out ``commit`` (fetched from ``origin`` if this clone lacks it) and write ``lock`` as
    ``dvc.lock``. Raises ``WorkerError`` when the commit is nowhere to be found."""
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        origin = _git(root, "remote", "get-url", "origin", check=False).stdout.strip() or "(no origin)"
        fetched = _git(root, "fetch", "--quiet", "origin", check=False)
        if _git(root, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
            raise WorkerError(f"commit {commit[:12]} is not in {root} nor on its origin {origin} "
                              f"({fetched.stderr.strip()[-300:] or 'fetched'}): push it where the workers clone from")
    _git(root, "checkout", "--quiet", "--force", "--detach", commit)
    if lock:
        (root / "dvc.lock").write_text(lock, encoding="utf-8")
    else:
        (root / "dvc.lock").unlink(missing_ok=True)


def run_stage(root: Path, stage_id: str, commit: str, lock: str, deps: list[str], tracking_uri: str | None = None) -> dict:
    """Steps 1-5 of the module docstring for ``stage_id`` in the checkout ``root``. ``deps`` are the
    stage's input data files (outputs of earlier stages). Returns what ran where and whether DVC
    recomputed it (``recomputed``: False when restored from the run cache)."""
    root = Path(root)
    uri = check_tracking_server(os.environ.get("MLFLOW_TRACKING_URI") or tracking_uri)
    url = check_dvc_remote(root)
    checkout(root, commit, lock)
    dvc = [sys.executable, "-m", "dvc"]
    env = {"MLFLOW_TRACKING_URI": uri}
    if deps:
        run_logged([*dvc, "pull", "--force", *deps], root, f"pull inputs of {stage_id} from {url}", env=env)
    recomputed = reproduce(stage_id, root, pull=True, env=env)
    run_logged([*dvc, "push", "--run-cache", stage_id], root, f"push {stage_id} to {url}", env=env)
    return {"stage": stage_id, "host": socket.gethostname(), "checkout": str(root), "commit": commit, "recomputed": recomputed}
