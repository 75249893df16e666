"""MLflow tracking is idempotent: re-runs replace, failures keep the finished record, and runs
left RUNNING by a killed process are swept."""

import os
import subprocess
import sys

import pytest

from selfevolve import tracking


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _runs(root, campaign="t", **tags):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name(campaign)
    flt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items()) or ""
    return client.search_runs([exp.experiment_id], flt, max_results=100)


def test_rerun_replaces_and_parent_is_unique(store):
    for value in (1.0, 2.0):
        with tracking.stage_run("t", "c1", "solve", {"a": {"b": 1}}, store) as run:
            run.log_metrics({"acc": value}, step=1, parent=True)
    stage = _runs(store, **{tracking.TAG_STAGE: "solve"})
    assert len(stage) == 1 and stage[0].data.metrics["acc"] == 2.0 and stage[0].info.status == "FINISHED"
    parents = _runs(store, **{tracking.TAG_KIND: "cycle"})
    assert len(parents) == 1 and parents[0].data.params["a.b"] == "1"
    assert (store / "mlflow" / "mlflow.db").exists()


def test_failure_keeps_the_finished_run(store):
    with tracking.stage_run("t", "c1", "verify", None, store):
        pass
    with pytest.raises(RuntimeError):
        with tracking.stage_run("t", "c1", "verify", None, store):
            raise RuntimeError("boom")
    statuses = sorted(r.info.status for r in _runs(store, **{tracking.TAG_STAGE: "verify"}))
    assert statuses == ["FAILED", "FINISHED"]
    with tracking.stage_run("t", "c1", "verify", None, store):
        pass
    assert [r.info.status for r in _runs(store, **{tracking.TAG_STAGE: "verify"})] == ["FINISHED"]


def test_killed_stage_run_is_swept(store):
    with tracking.stage_run("t", "c1", "plan", None, store):
        pass
    code = ("import os, sys\nfrom selfevolve import tracking\n"
            f"with tracking.stage_run('t', 'c1', 'plan', None, {str(store)!r}):\n    os._exit(9)\n")
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 9
    assert sorted(r.info.status for r in _runs(store, **{tracking.TAG_STAGE: "plan"})) == ["FINISHED", "RUNNING"]
    with tracking.stage_run("t", "c1", "solve", None, store):  # any later stage run sweeps
        pass
    assert [r.info.status for r in _runs(store, **{tracking.TAG_STAGE: "plan"})] == ["FINISHED"]


def test_local_store_keeps_artifacts_in_project_after_set_tracking_uri(store, monkeypatch):
    """``mlflow.set_tracking_uri`` exports MLFLOW_TRACKING_URI; a new experiment in the local store
    must still keep its artifacts under <root>/mlflow/artifacts (not the working directory's ./mlruns)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", None, raising=False)
    mlflow.set_tracking_uri(tracking.tracking_uri(store))
    assert os.environ.get("MLFLOW_TRACKING_URI")  # the behaviour this guards against
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    client = MlflowClient(tracking.tracking_uri(store))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.tracking_uri(store))
    exp = client.get_experiment(tracking.experiment_id(client, "after-set", store))
    assert exp.artifact_location == (store.resolve() / "mlflow" / "artifacts").as_uri()
