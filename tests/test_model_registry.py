"""Each cycle's kept model lands in the MLflow Model Registry (transformers flavour, aliases, the
champion by frontier accuracy, lineage and headline tags); cycle runs get the headline metrics; a
copied project's local store reads its own artifacts."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from selfevolve import model_registry, tracking

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FRONTIER = {"base": 0.30, "c1": 0.49, "c2": 0.45}


def _project(root, model_dir):
    """A project with three cycles' models, metrics, a dvc.lock naming their hashes, a git commit
    and MLflow cycle runs (as a campaign leaves them)."""
    for i, c in enumerate(FRONTIER):
        shutil.copytree(model_dir, root / "models" / c)
        (root / "metrics" / c).mkdir(parents=True)
        ev = {"heldout_frontier_accuracy": FRONTIER[c], "heldout_seed_accuracy": 0.97}
        if c != "base":
            ev["heldout_frontier_p_vs_base"] = 2.72109334e-19
            (root / "metrics" / c / "train_sft.json").write_text(json.dumps({"sft_kept": 0}))
            (root / "metrics" / c / "train_rl.json").write_text(json.dumps({"best_step": 3}))
        (root / "metrics" / c / "evaluate.json").write_text(json.dumps(ev))
    lock = {"schema": "2.0", "stages": {"bootstrap": {"outs": [{"path": "models/base", "md5": "b0.dir"}]},
                                        **{f"train_sft@{c}": {"outs": [{"path": f"models/{c}", "md5": f"{c}.dir"}]} for c in ("c1", "c2")}}}
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    for cmd in (["git", "init", "-q"], ["git", "add", "dvc.lock"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    for c in FRONTIER:
        with tracking.stage_run("t", c, "evaluate", None, root):
            pass
    return root


@pytest.fixture()
def project(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv(tracking.FLOW_RUN_ENV, "flow-run-123")
    root = tmp_path / "p"
    root.mkdir()
    return _project(root, tiny_model_dir)


def test_cycle_models_registered_with_aliases_champion_and_lineage(project, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    versions = model_registry.publish_cycles("t", project, ["c1", "c2"], {"c1": "base", "c2": "c1"})
    assert sorted(versions) == ["base", "c1", "c2"] and len(set(versions.values())) == 3
    client = MlflowClient(tracking.tracking_uri(project))
    champion = client.get_model_version_by_alias("t", "champion")
    assert str(champion.version) == versions["c1"]  # the best frontier accuracy
    tags = champion.tags
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    assert tags[tracking.TAG_GIT] == commit and tags[tracking.TAG_FLOW_RUN] == "flow-run-123"
    assert len(tags[tracking.TAG_LOCK]) == 64 and tags[model_registry.TAG_MD5] == "c1.dir"
    assert tags["headline.frontier accuracy"] == "0.490" and tags["headline.frontier p vs base"] == "2.7e-19"
    assert tags[model_registry.TAG_KEPT].startswith("RL checkpoint")
    # the cycle run carries the headline metrics, readable names first in their own section
    run = client.get_run(champion.run_id)
    assert run.data.tags[tracking.TAG_CYCLE] == "c1" and run.data.metrics["headline/frontier accuracy"] == 0.49
    # p-values to two significant digits: a table cell shows 2.7e-19 whole, not 2.72109334…
    assert run.data.metrics["headline/frontier p vs base"] == 2.7e-19
    # the same models again: no new versions
    assert model_registry.publish_cycles("t", project, ["c1", "c2"]) == versions
    assert len(client.search_model_versions("name = 't'")) == 3
    # a copied checkout reads its own artifacts: the original is gone
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)
    shutil.rmtree(project)
    uri = tracking.tracking_uri(copy)
    with tracking.fluent_uri(uri):
        pipe = mlflow.transformers.load_model("models:/t@champion")
    out = pipe("1+2=", max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert isinstance(out[0]["generated_text"], str) and len(out[0]["generated_text"]) > len("1+2=")
    exp = MlflowClient(uri).get_experiment_by_name("t")
    assert exp.artifact_location == (copy.resolve() / "mlflow" / "artifacts").as_uri()


def test_a_changed_model_gets_a_new_version_and_the_alias_moves(project):
    from mlflow.tracking import MlflowClient

    first = model_registry.publish_cycles("t", project, ["c1", "c2"])
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    lock["stages"]["train_sft@c2"]["outs"][0]["md5"] = "c2-new.dir"
    (project / "dvc.lock").write_text(yaml.safe_dump(lock))
    (project / "metrics" / "c2" / "evaluate.json").write_text(json.dumps({"heldout_frontier_accuracy": 0.6}))
    second = model_registry.publish_cycles("t", project, ["c1", "c2"])
    assert second["c1"] == first["c1"] and second["c2"] != first["c2"]
    client = MlflowClient(tracking.tracking_uri(project))
    assert str(client.get_model_version_by_alias("t", "c2").version) == second["c2"]
    assert str(client.get_model_version_by_alias("t", "champion").version) == second["c2"]


def test_over_the_size_limit_a_pointer_is_registered(project, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setattr(tracking, "MAX_ARTIFACT_BYTES", 1000)
    versions = model_registry.publish_cycles("t", project, [])
    client = MlflowClient(tracking.tracking_uri(project))
    mv = client.get_model_version("t", versions["base"])
    assert mv.tags[model_registry.TAG_POINTER] == "true" and mv.source.endswith("/model_pointer")
    with open(client.download_artifacts(mv.run_id, "model_pointer/pointer.json")) as fh:
        pointer = json.load(fh)
    assert pointer["path"] == str((project / "models" / "base").resolve()) and pointer["md5"] == "b0.dir"
