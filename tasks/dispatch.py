"""Running a campaign's stages (``selfevolve.stages.placement.stage_runs``) where ``placement`` says.

- ``dispatch: local`` (default): each stage is reproduced in the flow's own checkout, one after
  another, in DAG order (``tasks.repro.stage``): one machine, today's behaviour.
- ``dispatch: pools``: each stage is sent to the deployment ``stage/<pool>`` of its work pool
  (``run_deployment``) as soon as the stages it depends on are done, so independent branches (a
  cycle's evaluation and the next cycle's first stages, the shards of a stage) run at the same time
  on different workers. The worker reproduces the stage in its own clone and pushes the outputs and
  DVC's run-cache to the remote (``tasks.worker``); the flow then restores the result into its own
  workspace from the run-cache (``dvc repro --single-item --pull`` with recomputation refused), so
  ``dvc.lock`` here stays the one record and nothing is computed twice. A stage whose worker crashed
  or vanished (its flow run marked Crashed, e.g. by the zombie-detection automation that
  ``selfevolve deploy`` installs) is submitted again, to any worker of the pool, up to
  ``placement.attempts`` times; a stage that failed (an error, an unreachable remote) fails the
  campaign with the worker's message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from prefect import get_run_logger, task
from prefect.deployments import run_deployment

from selfevolve.config import Params
from selfevolve.orchestration.git import GitError, changed_tracked_files, git
from selfevolve.stages.placement import RESTORE_ONLY_ENV, StageRun, check_resources, pool_of, shard_counts
from tasks.repro import ROOT, outcome, reproduce, stage

#: DVC locks the repository while it works: the flow's own restores run one at a time.
_REPO_LOCK = threading.Lock()
#: The Prefect flow the workers run (flows/stage.py); its deployments are ``stage/<pool>``.
STAGE_FLOW = "stage"


def check_dvc_yaml(root: str | Path, params: Params) -> None:
    """``dvc.yaml`` must be what the registry generates for these shard counts. Raises ``ValueError``
    with the fix otherwise (the stages the flow would run would not be DVC's)."""
    from selfevolve.stages.dvc_yaml import is_current

    path = Path(root) / "dvc.yaml"
    if not is_current(path, shard_counts(params)):
        raise ValueError(f"{path} does not match params.yaml placement.shards and the stage registry: run "
                         "`selfevolve dvc-yaml` (and commit dvc.yaml when the stages run on workers)")


def workspace_commit(root: str | Path) -> str:
    """The commit the workers check out: ``HEAD`` of ``root``. Raises ``ValueError`` when a tracked
    file other than ``dvc.lock`` has uncommitted changes (the workers would run other code or params)."""
    try:
        dirty = [f for f in changed_tracked_files(root) if f != "dvc.lock"]
        commit = git(root, "rev-parse", "HEAD").stdout.strip()
    except GitError as exc:
        raise ValueError(f"dispatch to work pools needs the project in git ({root}): {exc}") from exc
    if dirty:
        raise ValueError(f"uncommitted changes in {', '.join(dirty[:5])}: workers run the committed code and params; "
                         "commit them and push where the workers clone from")
    return commit


def up_to_date(root: str | Path, stage_id: str) -> bool:
    """Whether ``dvc status`` finds ``stage_id`` unchanged in ``root`` (outputs present and matching)."""
    r = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", stage_id], cwd=root, capture_output=True, text=True)
    return r.returncode == 0 and json.loads(r.stdout or "{}") == {}


def restore(stage_id: str, root: str | Path) -> None:
    """Bring ``stage_id``'s result, pushed by a worker, into ``root`` from the remote's run-cache and
    record it in ``dvc.lock``. Raises ``RuntimeError`` if the stage would have to be recomputed."""
    with _REPO_LOCK:
        reproduce(stage_id, root, pull=True, env={RESTORE_ONLY_ENV: stage_id})


@task(name="dispatch", task_run_name="{stage_id} on {pool}")
def remote_stage(stage_id: str, pool: str, deps: list[str], commit: str, root: str, attempts: int, timeout_s: float,
                 tracking_uri: str | None):
    """Run ``stage_id`` on a worker of ``pool`` and restore its result here (module docstring). The
    run ends ``Cached`` when the stage was up to date here or the worker did not recompute it, else
    ``Completed`` (``tasks.repro.outcome``); its result is ``stage_id``."""
    logger = get_run_logger()
    if up_to_date(root, stage_id):
        logger.info("%s is up to date here: not sent", stage_id)
        return outcome(stage_id, False, stage_id)
    for attempt in range(1, attempts + 1):
        with _REPO_LOCK:
            lock_file = Path(root) / "dvc.lock"
            lock = lock_file.read_text(encoding="utf-8") if lock_file.is_file() else ""
        params = {"stage_id": stage_id, "commit": commit, "lock": lock, "deps": deps, "tracking_uri": tracking_uri}
        run = run_deployment(f"{STAGE_FLOW}/{pool}", parameters=params, timeout=timeout_s, flow_run_name=f"{stage_id}#{attempt}")
        state = run.state
        if state is not None and state.is_completed():
            break
        if state is not None and state.is_crashed() and attempt < attempts:
            logger.warning("%s crashed on its worker (%s): submitting it again to pool %s (attempt %d of %d)", stage_id,
                           state.message, pool, attempt + 1, attempts)
            continue
        if state is None or not state.is_final():
            raise RuntimeError(f"stage {stage_id} did not finish on pool {pool!r} within {timeout_s:.0f} s "
                               f"(is a worker polling it? `prefect worker start --pool {pool} --limit 1`)")
        raise RuntimeError(f"stage {stage_id} {state.name.lower()} on pool {pool!r}: {state.message}")
    restore(stage_id, root)
    logger.info("%s restored from the run-cache", stage_id)
    return outcome(stage_id, state.name != "Cached", stage_id)


def run_stages(runs: list[StageRun], params: Params, root: str | Path = ROOT) -> list[str]:
    """Run ``runs`` as ``params.placement`` says (module docstring). Returns the stage ids in order;
    raises the first stage failure."""
    root = str(root)
    check_resources(params)
    check_dvc_yaml(root, params)
    if params.placement.dispatch == "local":
        # the task ends Completed or Cached (tasks.repro.outcome); its result is the stage id
        return [stage(r.id, root=root, return_state=True).result() for r in runs]
    commit = workspace_commit(root)
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    futures = {}
    for r in runs:
        futures[r.id] = remote_stage.submit(r.id, pool_of(r, params), list(r.deps), commit, root, params.placement.attempts,
                                            params.placement.stage_timeout_s, uri,
                                            wait_for=[futures[u] for u in r.upstream if u in futures])
    return [f.result() for f in futures.values()]
