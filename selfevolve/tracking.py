"""MLflow tracking of every stage: the campaign is the experiment, each cycle a parent run, each
stage a nested run under it.

Idempotent: runs are found by tags (``selfevolve.cycle``, ``selfevolve.stage``). A stage run that
finishes deletes every earlier run of the same stage and cycle, so a re-run replaces its record
instead of adding a second, and a cycle has exactly one parent run however often its stages run.
A stage that fails keeps the earlier finished run beside its FAILED one. A stage killed mid-way
(``kill -9``) leaves a RUNNING run whose process is gone; the next stage run of the campaign
sweeps it: deleted when a finished run of the same stage exists (DVC may restore that run's
outputs from its cache without running the stage again), otherwise marked KILLED.

Tracking URI: ``MLFLOW_TRACKING_URI`` when set (any server), else the local store
``sqlite:///<root>/mlflow/mlflow.db`` with artifacts under ``<root>/mlflow/artifacts``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

TAG_CYCLE, TAG_STAGE, TAG_KIND = "selfevolve.cycle", "selfevolve.stage", "selfevolve.kind"
TAG_PID, TAG_HOST = "selfevolve.pid", "selfevolve.host"
#: MLflow's experiment-type tag: ``custom_model_development`` makes its UI show runs, metrics and charts.
EXPERIMENT_KIND = "mlflow.experimentKind"
#: Metrics shown first when comparing the cycles (``selfevolve ui`` puts them in the runs table).
SHARED_VIEW_TAG, CYCLES_VIEW = "mlflow.sharedViewState.", "selfevolve-cycles"
HEADLINE_METRICS = ("heldout_frontier_accuracy", "heldout_beyond_accuracy", "heldout_reach_50", "heldout_seed_accuracy",
                    "heldout_frontier_p_vs_base", "pool_growth",
                    "self_labels", "best_val_accuracy")


def _local_store(root: str | Path) -> str:
    return f"sqlite:///{Path(root).resolve() / 'mlflow' / 'mlflow.db'}"


def tracking_uri(root: str | Path = ".") -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    (Path(root).resolve() / "mlflow").mkdir(parents=True, exist_ok=True)
    return _local_store(root)


def _experiment_id(client, name: str, root: str | Path) -> str:
    """Id of experiment ``name`` (restored if deleted, created if missing). A new experiment in the
    project's local store keeps its artifacts under ``<root>/mlflow/artifacts``; on any other
    tracking server the server decides. Decided from the client's URI, not the environment, because
    ``mlflow.set_tracking_uri`` exports ``MLFLOW_TRACKING_URI`` even for the local store."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        if exp.tags.get(EXPERIMENT_KIND) is None:
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND, "custom_model_development")
        return exp.experiment_id
    artifacts = None
    if client.tracking_uri == _local_store(root):
        artifacts = (Path(root).resolve() / "mlflow" / "artifacts").as_uri()
    # a model-development experiment: the UI opens it on its runs (the cycles), not on the GenAI overview
    return client.create_experiment(name, artifact_location=artifacts, tags={EXPERIMENT_KIND: "custom_model_development"})


def _find(client, exp_id: str, **tags: str):
    flt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    return client.search_runs([exp_id], filter_string=flt, max_results=50, order_by=["attributes.start_time DESC"])


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _alive(pid: str | None, host: str | None) -> bool:
    """Whether the process that owns a run may still be running (unknown owners count as alive)."""
    import socket

    import psutil

    if not pid or host != socket.gethostname():
        return True
    try:
        return psutil.pid_exists(int(pid))
    except ValueError:
        return True


def sweep_orphans(client, exp_id: str) -> int:
    """Close stage runs left RUNNING by a killed process (see module docstring). Returns how many."""
    n = 0
    running = client.search_runs([exp_id], filter_string=f"tags.`{TAG_KIND}` = 'stage' and attributes.status = 'RUNNING'",
                                 max_results=1000)
    for run in running:
        if _alive(run.data.tags.get(TAG_PID), run.data.tags.get(TAG_HOST)):
            continue
        key = {TAG_CYCLE: run.data.tags.get(TAG_CYCLE, ""), TAG_STAGE: run.data.tags.get(TAG_STAGE, "")}
        if any(r.info.status == "FINISHED" for r in _find(client, exp_id, **key)):
            client.delete_run(run.info.run_id)
        else:
            client.set_terminated(run.info.run_id, status="KILLED")
        n += 1
    return n


class StageRun:
    """Handle given to a stage body: log metrics (per step), dicts, files and models to its run."""

    def __init__(self, client, run_id: str, parent_id: str):
        self.client, self.run_id, self.parent_id = client, run_id, parent_id

    def log_metrics(self, metrics: dict[str, float], step: int | None = None, parent: bool = False) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(k, float(v), ts, step or 0) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if ms:
            self.client.log_batch(self.run_id, metrics=ms)
            if parent:
                self.client.log_batch(self.parent_id, metrics=ms)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, obj, artifact_file)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path)
        elif path.exists():
            self.client.log_artifact(self.run_id, str(path), artifact_path)


@contextlib.contextmanager
def stage_run(campaign: str, cycle: str, stage: str, params: dict | None = None, root: str | Path = ".") -> Iterator[StageRun]:
    """Open (or replace) the nested MLflow run of ``stage`` under the parent run of ``cycle``.

    On success the run ends FINISHED; on an exception it ends FAILED and the exception propagates.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(root))
    exp_id = _experiment_id(client, campaign, root)
    parents = _find(client, exp_id, **{TAG_CYCLE: cycle, TAG_KIND: "cycle"})
    if parents:
        parent_id = parents[0].info.run_id
        for extra in parents[1:]:
            client.delete_run(extra.info.run_id)
        if parents[0].info.status != "RUNNING":
            client.update_run(parent_id, status="RUNNING")
    else:
        parent = client.create_run(exp_id, run_name=cycle, tags={TAG_CYCLE: cycle, TAG_KIND: "cycle"})
        parent_id = parent.info.run_id
        if params:
            from mlflow.entities import Param

            items = [Param(k, str(v)[:500]) for k, v in flatten(params).items()]
            for i in range(0, len(items), 100):
                client.log_batch(parent_id, params=items[i:i + 100])
    sweep_orphans(client, exp_id)
    import socket

    run = client.create_run(exp_id, run_name=f"{cycle}/{stage}",
                            tags={TAG_CYCLE: cycle, TAG_STAGE: stage, TAG_KIND: "stage", "mlflow.parentRunId": parent_id,
                                  TAG_PID: str(os.getpid()), TAG_HOST: socket.gethostname()})
    handle = StageRun(client, run.info.run_id, parent_id)
    try:
        yield handle
    except BaseException:
        client.set_terminated(run.info.run_id, status="FAILED")
        client.set_terminated(parent_id, status="FAILED")
        raise
    client.set_terminated(run.info.run_id, status="FINISHED")
    for old in _find(client, exp_id, **{TAG_CYCLE: cycle, TAG_STAGE: stage}):
        if old.info.run_id != run.info.run_id:
            client.delete_run(old.info.run_id)
    client.set_terminated(parent_id, status="FINISHED")


def campaign_urls(base_url: str, campaign: str, client=None) -> dict[str, str]:
    """Where the MLflow UI at ``base_url`` shows a campaign, for people to compare its cycles:

    * ``cycles``: the experiment's runs table (model-training view): the cycle runs with the
      ``HEADLINE_METRICS`` as columns (a shared view the function stores as an experiment tag);
    * ``compare``: the cycle runs side by side (every metric and parameter per cycle);
    * ``report``: the report run's charts, one series per metric over the cycles.

    Keys whose runs do not exist yet are left out. Raises ``KeyError`` when the campaign has no
    experiment in the tracking store."""
    import json
    from urllib.parse import quote, urlencode

    from mlflow.tracking import MlflowClient

    client = client or MlflowClient(tracking_uri=base_url)
    exp = client.get_experiment_by_name(campaign)
    if exp is None:
        raise KeyError(f"no MLflow experiment {campaign!r} at {base_url}: run a campaign first (make run)")
    eid = exp.experiment_id
    ui = base_url.rstrip("/") + "/#"
    # MLflow's shared view (an experiment tag the UI reads for ?viewStateShareKey=...): the cycle runs
    # in start order with the headline metrics as columns
    cycle_runs = f"tags.`{TAG_KIND}` = 'cycle' and tags.`{TAG_CYCLE}` != 'campaign'"
    state = {"searchFilter": cycle_runs, "orderByKey": "attributes.start_time", "orderByAsc": True,
             "selectedColumns": [f"metrics.`{m}`" for m in HEADLINE_METRICS]}
    client.set_experiment_tag(eid, SHARED_VIEW_TAG + CYCLES_VIEW, json.dumps(state))
    query = urlencode({"workflowType": "machine_learning", "viewStateShareKey": CYCLES_VIEW})
    out = {"cycles": f"{ui}/experiments/{eid}/runs?{query}"}
    cycles = client.search_runs([eid], filter_string=cycle_runs, order_by=["attributes.start_time ASC"])
    if cycles:
        ids = quote(json.dumps([r.info.run_id for r in cycles]))
        out["compare"] = f"{ui}/compare-runs?runs={ids}&experiments={quote(json.dumps([eid]))}&workflowType=machine_learning"
    report = client.search_runs([eid], filter_string=f"tags.`{TAG_STAGE}` = 'report'", max_results=1)
    if report:
        out["report"] = f"{ui}/experiments/{eid}/runs/{report[0].info.run_id}/model-metrics?workflowType=machine_learning"
    return out
