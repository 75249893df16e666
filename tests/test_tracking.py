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
    import torch  # noqa: F401  (a stage that ran torch is tagged with its numerical path)

    for value in (1.0, 2.0):
        with tracking.stage_run("t", "c1", "solve", {"a": {"b": 1}}, store) as run:
            run.log_metrics({"acc": value}, step=1, parent=True)
    stage = _runs(store, **{tracking.TAG_STAGE: "solve"})
    assert len(stage) == 1 and stage[0].data.metrics["acc"] == 2.0 and stage[0].info.status == "FINISHED"
    parents = _runs(store, **{tracking.TAG_KIND: "cycle"})
    assert len(parents) == 1 and parents[0].data.params["a.b"] == "1"
    assert (store / "mlflow" / "mlflow.db").exists()
    from selfevolve.runtime_env import NUMERICS_TAGS, native_bfloat16
    tags = stage[0].data.tags  # the numerical path the stage ran on, read from this process's torch
    assert [tags[k] for k in NUMERICS_TAGS] == [torch.backends.cpu.get_cpu_capability(), str(native_bfloat16()).lower(),
                                                 str(torch.get_num_threads()), torch.__version__]


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


def _traces(root, campaign="t", **search):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name(campaign)
    return client.search_traces(locations=[exp.experiment_id], **search)


def test_traces_are_linked_to_their_stage_run_and_replaced_by_a_rerun(store):
    tree = tracking.Span("question q1", "CHAIN", inputs={"question": "Compute 2 + 3."}, outputs={"pass_rate": 0.5},
                         children=[tracking.Span("solver", "LLM", inputs={"prompt": "p"}, outputs={"completion": "5"},
                                                 attributes={"reward": 1.0, "none": None},
                                                 children=[tracking.Span("verifier", "TOOL", outputs={"correct": 1.0})])])
    with tracking.stage_run("t", "c1", "rewards", None, store) as run:
        first = run.log_traces([tree, tracking.Span("question q2", "CHAIN")])
    assert len(first) == 2 and len(_traces(store)) == 2
    with tracking.stage_run("t", "c1", "rewards", None, store) as run:
        (again,) = run.log_traces([tree])
        latest = run.run_id
    with tracking.stage_run("t", "c2", "rewards", None, store) as run:  # another cycle's traces stay beside c1's
        run.log_traces([tree])
    (trace,) = _traces(store, run_id=latest)
    assert trace.info.trace_id == again and len(_traces(store)) == 2
    assert trace.info.tags[tracking.TAG_CYCLE] == "c1" and trace.info.tags[tracking.TAG_STAGE] == "rewards"
    spans = {s.name: s for s in trace.data.spans}
    assert set(spans) == {"question q1", "solver", "verifier"}
    assert spans["verifier"].parent_id == spans["solver"].span_id and spans["solver"].parent_id == spans["question q1"].span_id
    assert spans["solver"].attributes["reward"] == 1.0 and "none" not in spans["solver"].attributes
    assert spans["solver"].outputs == {"completion": "5"} and spans["solver"].span_type == "LLM"


def test_step_metrics_logged_in_the_background_are_stored_when_the_run_ends(store):
    """Per-step curves go to MLflow asynchronously (``StageRun.log_metrics``); the run is not ended
    before every point is stored."""
    from mlflow.tracking import MlflowClient

    with tracking.stage_run("t", "c1", "train_rl", None, store) as run:
        for step in range(1, 201):
            run.log_metrics({"loss": 1.0 / step, "lr": 1e-3}, step=step, background=True)
        run_id = run.run_id
    client = MlflowClient(tracking.tracking_uri(store))
    assert sorted(m.step for m in client.get_metric_history(run_id, "loss")) == list(range(1, 201))
    assert client.get_run(run_id).info.status == "FINISHED"


def test_campaign_urls_finds_the_registered_model_of_a_name_with_quotes(store):
    """The registered model is looked up by name, so a campaign named ``it's "x"`` still gets its link
    (a filter string would break on the quotes)."""
    from mlflow.tracking import MlflowClient

    name = "it's \"x\""
    client = MlflowClient(tracking.tracking_uri(store))
    client.create_experiment(name)
    assert "model" not in tracking.campaign_urls("http://127.0.0.1:5000", name, client=client)
    client.create_registered_model(name)
    urls = tracking.campaign_urls("http://127.0.0.1:5000", name, client=client)
    assert urls["model"] == "http://127.0.0.1:5000/#/models/it%27s%20%22x%22"
