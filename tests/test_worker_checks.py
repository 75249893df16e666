"""What a worker and the dispatching flow refuse, with a message naming what is wrong: an
unreachable DVC remote or tracking server, a commit nobody pushed, a checkout with uncommitted
changes, a dvc.yaml that does not match the shard counts, and a restore that would recompute."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from selfevolve.orchestration import services
from selfevolve.config import Params

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _repo(path: Path, remote_url: str | None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "README").write_text("x\n")
    for cmd in (["git", "init", "-q"], [str(BIN / "dvc"), "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"]):
        subprocess.run(cmd, cwd=path, check=True, capture_output=True)
    if remote_url:
        subprocess.run([str(BIN / "dvc"), "remote", "add", "-d", "--local", "shared", remote_url], cwd=path, check=True,
                       capture_output=True)
    return path


def test_an_unreachable_tracking_server_is_named():
    url = f"http://127.0.0.1:{services.free_port()}"
    with pytest.raises(services.ServiceUnreachable, match=f"cannot reach the MLflow tracking server {url}"):
        services.check_tracking_server(url)
    with pytest.raises(services.ServiceUnreachable, match="no MLflow tracking server"):
        services.check_tracking_server("sqlite:///mlflow.db")


def test_an_unreachable_or_missing_dvc_remote_is_named(tmp_path):
    repo = _repo(tmp_path / "a", "/proc/selfevolve-no-such-remote/store")
    with pytest.raises(services.ServiceUnreachable, match=r"cannot reach DVC remote 'shared' \(/proc/selfevolve-no-such-remote"):
        services.check_dvc_remote(repo)
    with pytest.raises(services.ServiceUnreachable, match="no default DVC remote"):
        services.check_dvc_remote(_repo(tmp_path / "b", None))
    ok = _repo(tmp_path / "c", str(tmp_path / "remote"))
    assert services.check_dvc_remote(ok) == str(tmp_path / "remote") and (tmp_path / "remote").is_dir()


def test_a_stage_sent_to_a_worker_that_cannot_log_fails_before_it_touches_the_checkout(tmp_path):
    from tasks.worker import run_stage

    repo = _repo(tmp_path / "w", str(tmp_path / "remote"))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    env = dict(os.environ)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        with pytest.raises(services.ServiceUnreachable, match="cannot reach the MLflow tracking server"):
            run_stage(repo, "seeds", head, "", [], tracking_uri=f"http://127.0.0.1:{services.free_port()}")
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert not (repo / "dvc.lock").exists()


def test_a_commit_the_worker_cannot_find_is_named(tmp_path):
    from tasks.worker import WorkerError, checkout

    repo = _repo(tmp_path / "w", None)
    with pytest.raises(WorkerError, match="commit 0123456789ab is not in .* nor on its origin"):
        checkout(repo, "0123456789abcdef0123456789abcdef01234567", "")


def test_the_flow_dispatches_only_committed_code_and_a_matching_dvc_yaml(tmp_path):
    from tasks.dispatch import check_dvc_yaml, workspace_commit

    repo = _repo(tmp_path / "h", None)
    assert len(workspace_commit(repo)) == 40
    (repo / "dvc.lock").write_text("schema: '2.0'\n")
    subprocess.run(["git", "add", "dvc.lock"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "lock"], cwd=repo, check=True)
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")  # the flow's own record may differ
    assert len(workspace_commit(repo)) == 40
    (repo / "README").write_text("changed\n")
    with pytest.raises(ValueError, match="uncommitted changes in README"):
        workspace_commit(repo)
    (repo / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    check_dvc_yaml(repo, Params())
    with pytest.raises(ValueError, match="selfevolve dvc-yaml"):
        check_dvc_yaml(repo, Params.model_validate({"placement": {"shards": {"solve": 2}}}))


@pytest.mark.slow
def test_a_restore_that_would_recompute_is_refused(tmp_path):
    env = services.quiet_env({"SELFEVOLVE_RESTORE_ONLY": "seeds"})
    r = subprocess.run([str(BIN / "selfevolve"), "seeds", "--params", str(ROOT / "params.yaml"), "--root", str(tmp_path)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "about to be recomputed while restoring" in r.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_the_worker_command_names_the_server_it_cannot_reach(tmp_path):
    env = services.quiet_env({"PREFECT_API_URL": f"http://127.0.0.1:{services.free_port()}/api"})
    r = subprocess.run([str(BIN / "selfevolve"), "worker", "--pool", "gpu", "--root", str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "cannot reach the Prefect server" in r.stderr
