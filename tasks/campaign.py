"""The campaign flow's closing tasks: the report over the campaign so far, and the commit of
``dvc.lock`` that makes the campaign's record travel with the code."""

from __future__ import annotations

import sys
from pathlib import Path

from prefect import get_run_logger, task

from selfevolve.orchestration.git import GitError, commit_file, is_repository
from tasks.repro import ROOT, run_logged


@task(name="report", retries=1, retry_delay_seconds=5, task_run_name="report")
def report(root: str = str(ROOT)) -> str:
    """``selfevolve report``: plots and markdown for the campaign so far (reports/), logged to MLflow."""
    run_logged([str(Path(sys.executable).parent / "selfevolve"), "report", "--root", root], root, "report")
    return f"{root}/reports/report.md"


@task(name="commit dvc.lock", task_run_name="commit dvc.lock")
def commit_lock(message: str, root: str = str(ROOT)) -> bool:
    """Commit ``dvc.lock`` (only that file) to the git repository at ``root`` when it changed, so the
    record of what the campaign made travels with the code; a commit that cannot be made (no git
    repository, a failing commit) is logged and skipped. Returns whether a commit was made."""
    logger = get_run_logger()
    if not is_repository(root):
        logger.info("%s is not a git repository: dvc.lock not committed", root)
        return False
    if not (Path(root) / "dvc.lock").is_file():
        return False
    try:
        made = commit_file(root, "dvc.lock", message)
    except GitError as exc:
        logger.warning("could not commit dvc.lock: %s", exc)
        return False
    if made:
        logger.info("committed dvc.lock: %s", message)
    return made
