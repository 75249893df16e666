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
``sqlite:///<root>/mlflow/mlflow.db`` with artifacts under ``<root>/mlflow/artifacts``. The local
store is re-rootable: a copied or moved project rewrites the artifact locations its store holds
to its own ``mlflow/artifacts`` the first time it is used (:func:`reroot_local_store`), so it
reads and writes its own artifacts, never the original's.

Every stage run carries its lineage (:func:`lineage_tags`): the git commit (MLflow's Source
column), the SHA-256 of ``dvc.lock`` when the run started, and the Prefect flow run that ran it;
and, set when the stage ends if it ran torch, the numerical path it ran on
(``selfevolve.runtime_env.numerics_tags``: CPU kernels, native bfloat16, threads, torch version),
since another path trains other weights from the same inputs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from selfevolve.headline import HEADLINE

log = logging.getLogger(__name__)

TAG_CYCLE, TAG_STAGE, TAG_KIND = "selfevolve.cycle", "selfevolve.stage", "selfevolve.kind"
TAG_PID, TAG_HOST = "selfevolve.pid", "selfevolve.host"
#: MLflow's experiment-type tag: ``custom_model_development`` (runs, metrics and charts). MLflow 3.17's UI ignores it
#: when its workflow-based navigation is on and opens the view chosen per browser (GenAI unless switched to
#: Model training), so the links ``campaign_urls`` makes carry ``workflowType=machine_learning``.
EXPERIMENT_KIND = "mlflow.experimentKind"
#: Metrics shown first when comparing the cycles (``selfevolve ui`` puts them in the runs table):
#: the headline metrics under their readable names (``selfevolve.model_registry`` logs them).
SHARED_VIEW_TAG, CYCLES_VIEW = "mlflow.sharedViewState.", "selfevolve-cycles"
HEADLINE_METRICS = tuple(f"headline/{h.name}" for h in HEADLINE)
#: Outputs (models included) larger than this are logged to MLflow as a pointer (path and size), not copied.
MAX_ARTIFACT_BYTES = 500_000_000
#: Prefect's flow-run id, handed by the orchestration to the stage processes it starts.
FLOW_RUN_ENV = "SELFEVOLVE_FLOW_RUN_ID"
TAG_GIT, TAG_LOCK, TAG_FLOW_RUN = "mlflow.source.git.commit", "selfevolve.dvc_lock_sha256", "selfevolve.prefect_flow_run"
#: Columns of the local store that hold artifact locations (rewritten by :func:`reroot_local_store`).
_LOCATION_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("model_versions", "source"),
                     ("model_versions", "storage_location"), ("logged_models", "artifact_location"))


def _local_store(root: str | Path) -> str:
    return f"sqlite:///{Path(root).resolve() / 'mlflow' / 'mlflow.db'}"


def reroot_local_store(root: str | Path) -> int:
    """Point the artifact locations of ``<root>/mlflow/mlflow.db`` at ``<root>/mlflow/artifacts``
    when they name another project's (the store was copied or moved). Returns the number of rows
    rewritten (0 for a store already at home, a missing store, or one without local artifacts)."""
    import sqlite3

    home = Path(root).resolve() / "mlflow"
    db = home / "mlflow.db"
    if not db.is_file():
        return 0
    new = str(home / "artifacts")
    con = sqlite3.connect(db)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        if "experiments" not in tables:
            return 0
        old = None
        for (loc,) in con.execute("select artifact_location from experiments"):
            path = (loc or "").removeprefix("file://")
            if path.endswith("/mlflow/artifacts") and path != new:
                old = path
                break
        if old is None:
            return 0
        n = 0
        with con:
            for table, col in _LOCATION_COLUMNS:
                if table in tables:
                    n += con.execute(f"update {table} set {col} = replace({col}, ?, ?) where instr({col}, ?) > 0",
                                     (old, new, old)).rowcount
        log.info("MLflow store %s moved from %s: %d artifact locations now under %s", db, old, n, new)
        return n
    finally:
        con.close()


def tracking_uri(root: str | Path = ".") -> str:
    """``MLFLOW_TRACKING_URI`` when set, else the project's local store (created, and re-rooted
    when copied from another project: :func:`reroot_local_store`)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri and uri != _local_store(root):
        return uri
    (Path(root).resolve() / "mlflow").mkdir(parents=True, exist_ok=True)
    reroot_local_store(root)
    return _local_store(root)


@contextlib.contextmanager
def fluent_uri(uri: str) -> Iterator[None]:
    """MLflow's fluent API (``mlflow.start_run``, ``mlflow.<flavour>.log_model``/``load_model``)
    pointed at ``uri`` for tracking and the Model Registry inside the block; the URIs and their
    environment variables are restored afterwards (``mlflow.set_tracking_uri`` exports them)."""
    import mlflow
    from mlflow.tracking import _model_registry, _tracking_service

    saved_env = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    saved = (_tracking_service.utils._tracking_uri, _model_registry.utils._registry_uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        _tracking_service.utils._tracking_uri, _model_registry.utils._registry_uri = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def lineage_tags(root: str | Path = ".") -> dict[str, str]:
    """Where a run's inputs came from: ``mlflow.source.git.commit`` (``HEAD`` of ``root``'s git
    repository), ``selfevolve.dvc_lock_sha256`` (of ``<root>/dvc.lock``) and
    ``selfevolve.prefect_flow_run`` (``$SELFEVOLVE_FLOW_RUN_ID``); each only when known."""
    import hashlib

    from selfevolve.orchestration.git import head_commit

    tags = {}
    if commit := head_commit(root):
        tags[TAG_GIT] = commit
    lock = Path(root) / "dvc.lock"
    if lock.is_file():
        tags[TAG_LOCK] = hashlib.sha256(lock.read_bytes()).hexdigest()
    if os.environ.get(FLOW_RUN_ENV):
        tags[TAG_FLOW_RUN] = os.environ[FLOW_RUN_ENV]
    return tags


def experiment_id(client, name: str, root: str | Path) -> str:
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
    # a model-development experiment (see EXPERIMENT_KIND for what the UI makes of it)
    return client.create_experiment(name, artifact_location=artifacts, tags={EXPERIMENT_KIND: "custom_model_development"})


def find_runs(client, exp_id: str, **tags: str):
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
        if any(r.info.status == "FINISHED" for r in find_runs(client, exp_id, **key)):
            client.delete_run(run.info.run_id)
        else:
            client.set_terminated(run.info.run_id, status="KILLED")
        n += 1
    return n


#: Items a stage traces per cycle: a bounded sample to read in MLflow's Traces tab (every item is in the stage's JSONL outputs).
TRACE_ITEMS = 8


@dataclass
class Span:
    """One step of a traced item, logged as an MLflow span: ``name``, MLflow's ``span_type`` (``LLM``
    for a model call, ``TOOL`` for a verifier, ``AGENT``, ``CHAIN`` for the item), JSON-able
    ``inputs`` and ``outputs``, ``attributes`` (rewards, scores, verdicts) and nested ``children``."""

    name: str
    span_type: str = "UNKNOWN"
    inputs: Any = None
    outputs: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    children: list["Span"] = field(default_factory=list)


class StageRun:
    """Handle given to a stage body: log metrics (per step), dicts, files and traces to its run."""

    def __init__(self, client, run_id: str, parent_id: str, experiment_id: str = "", tags: dict[str, str] | None = None):
        self.client, self.run_id, self.parent_id = client, run_id, parent_id
        self.experiment_id, self.tags = experiment_id, dict(tags or {})
        self._pending: list = []  # MLflow's RunOperations of metrics logged in the background

    def log_metrics(self, metrics: dict[str, float], step: int | None = None, parent: bool = False,
                    background: bool = False) -> None:
        """Log the numeric values of ``metrics`` at ``step`` (also to the cycle's run with ``parent``).
        ``background``: MLflow's asynchronous logging, for per-step curves (a synchronous call took
        6-12 ms against the campaign's one-worker server, 2-4 s of a train_rl's 300 steps, and ~44 ms
        against an ``mlflow server`` with its default four workers, where a kept-alive connection waits
        on each reply); :meth:`flush` waits for them and raises if one failed (``stage_run`` flushes
        before it ends the run)."""
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(k, float(v), ts, step or 0) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if ms:
            if background:
                self._pending.append(self.client.log_batch(self.run_id, metrics=ms, synchronous=False))
            else:
                self.client.log_batch(self.run_id, metrics=ms)
            if parent:
                self.client.log_batch(self.parent_id, metrics=ms)

    def flush(self) -> None:
        """Wait until the metrics logged in the background are stored; raises MLflow's error if any failed."""
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, obj, artifact_file)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path)
        elif path.exists():
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_traces(self, roots: list[Span]) -> list[str]:
        """Log each tree of spans as one MLflow trace of the experiment, linked to this run (MLflow's
        ``mlflow.sourceRun``: the run page lists it) and tagged with the run's cycle and stage. The
        traces an earlier run of the same cycle and stage logged are deleted first, as its run is
        (a re-run replaces its record). Returns the new trace ids."""
        import mlflow

        with fluent_uri(self.client.tracking_uri):
            filters = " AND ".join(f"tag.`{k}` = '{v}'" for k, v in self.tags.items()) or None
            old, token = [], None
            while True:  # a tracking server answers at most a few hundred per page
                page = self.client.search_traces(locations=[self.experiment_id], filter_string=filters, include_spans=False,
                                                 page_token=token)
                old += [t.info.trace_id for t in page if t.info.trace_metadata.get("mlflow.sourceRun") != self.run_id]
                token = page.token
                if not token:
                    break
            for i in range(0, len(old), 100):
                self.client.delete_traces(self.experiment_id, trace_ids=old[i:i + 100])

            def emit(span: Span, parent=None, **root):
                live = mlflow.start_span_no_context(span.name, span_type=span.span_type, parent_span=parent, inputs=span.inputs,
                                                    attributes={k: v for k, v in span.attributes.items() if v is not None}, **root)
                for child in span.children:
                    emit(child, live)
                live.set_outputs(span.outputs)
                live.end()
                return live

            ids = [emit(r, experiment_id=self.experiment_id, tags=self.tags,
                        metadata={"mlflow.sourceRun": self.run_id}).trace_id for r in roots]
            # terminate: the export threads stop here, so the process does not wait for them again at exit
            # (MLflow's exit hook joins a consumer that polls its queue once a second: ~1 s per traced stage);
            # traces logged later in this process are then written synchronously.
            mlflow.flush_trace_async_logging(terminate=True)
        return ids


@contextlib.contextmanager
def stage_run(campaign: str, cycle: str, stage: str, params: dict | None = None, root: str | Path = ".") -> Iterator[StageRun]:
    """Open (or replace) the nested MLflow run of ``stage`` under the parent run of ``cycle``.

    On success the run ends FINISHED; on an exception it ends FAILED and the exception propagates.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(root))
    exp_id = experiment_id(client, campaign, root)
    parents = find_runs(client, exp_id, **{TAG_CYCLE: cycle, TAG_KIND: "cycle"})
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

    from selfevolve.runtime_env import numerics_tags

    run = client.create_run(exp_id, run_name=f"{cycle}/{stage}",
                            tags={TAG_CYCLE: cycle, TAG_STAGE: stage, TAG_KIND: "stage", "mlflow.parentRunId": parent_id,
                                  TAG_PID: str(os.getpid()), TAG_HOST: socket.gethostname(),
                                  "mlflow.source.name": f"selfevolve {stage}", **lineage_tags(root)})
    handle = StageRun(client, run.info.run_id, parent_id, exp_id, {TAG_CYCLE: cycle, TAG_STAGE: stage})

    def tag_numerics() -> None:  # after the stage's work: only then is it known whether it ran torch
        from mlflow.entities import RunTag

        if tags := numerics_tags():
            client.log_batch(run.info.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    try:
        yield handle
        handle.flush()
        tag_numerics()
    except BaseException:
        with contextlib.suppress(Exception):  # what the stage logged before it failed, as far as it goes
            handle.flush()
            tag_numerics()
        client.set_terminated(run.info.run_id, status="FAILED")
        client.set_terminated(parent_id, status="FAILED")
        raise
    client.set_terminated(run.info.run_id, status="FINISHED")
    for old in find_runs(client, exp_id, **{TAG_CYCLE: cycle, TAG_STAGE: stage}):
        if old.info.run_id != run.info.run_id:
            client.delete_run(old.info.run_id)
    client.set_terminated(parent_id, status="FINISHED")


def campaign_urls(base_url: str, campaign: str, client=None) -> dict[str, str]:
    """Where the MLflow UI at ``base_url`` shows a campaign, for people to compare its cycles:

    * ``cycles``: the experiment's runs table (model-training view): the cycle runs with the
      ``HEADLINE_METRICS`` as columns (a shared view the function stores as an experiment tag);
    * ``compare``: the cycle runs side by side (every metric and parameter per cycle);
    * ``report``: the report run's charts, one series per metric over the cycles;
    * ``trace``: a question's round through the roles (the first trace of the last cycle that traced
      one, ``StageRun.log_traces``), opened in the experiment's Traces tab;
    * ``model``: the registered model of the campaign's cycles (one version per cycle, an alias per
      cycle and ``champion``; ``selfevolve.model_registry``).

    Keys whose runs do not exist yet are left out. Raises ``KeyError`` when the campaign has no
    experiment in the tracking store."""
    import json
    from urllib.parse import quote, urlencode

    from mlflow.exceptions import MlflowException
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
    traces = client.search_traces(locations=[eid], filter_string=f"tag.`{TAG_STAGE}` = 'rewards'", include_spans=False,
                                  order_by=["timestamp_ms DESC"], max_results=1)
    if traces:
        out["trace"] = f"{ui}/experiments/{eid}/traces?{urlencode({'selectedEvaluationId': traces[0].info.trace_id})}"
    try:  # by name, not a filter string: a campaign name may hold quotes
        client.get_registered_model(campaign)
        out["model"] = f"{ui}/models/{quote(campaign, safe='')}"
    except MlflowException:
        pass
    return out
