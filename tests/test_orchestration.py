"""The orchestration package's git and process-group helpers, on a real git repository and real
process trees."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from selfevolve import tracking
from selfevolve.orchestration.git import GitError, changed_tracked_files, commit_file, git, head_commit, is_repository
from selfevolve.orchestration.processes import stop_group


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no global identity: the fallback one is used
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "params.yaml").write_text("seed: 0\n")
    (root / "dvc.lock").write_text("schema: '2.0'\n")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    return root


def test_commit_file_commits_that_file_alone_and_only_when_it_changed(repo):
    start = head_commit(repo)
    assert start and len(start) == 40 and is_repository(repo)
    assert commit_file(repo, "dvc.lock", "nothing new") is False and head_commit(repo) == start
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (repo / "params.yaml").write_text("seed: 1\n")
    git(repo, "add", "params.yaml")  # staged, but not part of the commit
    assert changed_tracked_files(repo) == ["dvc.lock", "params.yaml"]
    assert commit_file(repo, "dvc.lock", "campaign: dvc.lock after base") is True
    assert head_commit(repo) != start
    assert git(repo, "show", "--name-only", "--format=%an %s", "HEAD").stdout.split() == \
        ["selfevolve", "campaign:", "dvc.lock", "after", "base", "dvc.lock"]
    assert changed_tracked_files(repo) == ["params.yaml"]


def test_outside_a_repository(tmp_path):
    assert head_commit(tmp_path) is None and not is_repository(tmp_path)
    with pytest.raises(GitError, match="status"):
        changed_tracked_files(tmp_path)
    assert tracking.TAG_GIT not in tracking.lineage_tags(tmp_path)


def test_lineage_names_the_commit(repo):
    assert tracking.lineage_tags(repo)[tracking.TAG_GIT] == head_commit(repo)


def _alive(pid: int) -> bool:
    return subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode == 0


def test_stop_group_stops_the_grandchildren_too_and_kills_what_ignores_sigterm():
    # a child that ignores SIGTERM and starts a grandchild, both in the child's process group
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    grandchild = int(proc.stdout.readline())
    t = time.monotonic()
    stop_group(proc, timeout_s=1.0)
    assert proc.poll() is not None and time.monotonic() - t < 30
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)
    stop_group(proc)  # already gone: a no-op
    stop_group(None)


def test_openmp_threads_spin_briefly_unless_the_environment_chooses(monkeypatch):
    """Every entry point and service process gets libgomp's spin count of 1,000 (threads spin ~10 us,
    then sleep) unless the environment sets its own wait policy, which is then left alone: a user's
    OMP_WAIT_POLICY=PASSIVE must not be turned back into spinning by the default spin count."""
    from selfevolve.orchestration.services import quiet_env
    from selfevolve.runtime_env import apply_defaults

    assert apply_defaults({})["GOMP_SPINCOUNT"] == "1000"
    assert "GOMP_SPINCOUNT" not in apply_defaults({"OMP_WAIT_POLICY": "PASSIVE"})
    assert apply_defaults({"GOMP_SPINCOUNT": "5"})["GOMP_SPINCOUNT"] == "5"
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    env = quiet_env()
    assert (env.get("GOMP_SPINCOUNT"), env.get("OMP_WAIT_POLICY")) == ("1000", None)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    env = quiet_env()
    assert (env.get("GOMP_SPINCOUNT"), env.get("OMP_WAIT_POLICY")) == (None, "PASSIVE")
