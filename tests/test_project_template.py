"""The test projects (``helpers.make_project``, used by the campaign and cluster tests) start from the
code, never from the campaign of the checkout the tests run in (issue 24: the cluster test's
reference dvc.lock held c2 stages after a one-cycle campaign, from the checkout's committed dvc.lock)."""

from __future__ import annotations

import shutil
import subprocess

from helpers import ROOT, make_project


def test_a_checkouts_committed_dvc_lock_does_not_leak_into_test_projects(tmp_path):
    host = tmp_path / "checkout"
    (host / "selfevolve").mkdir(parents=True)
    shutil.copytree(ROOT / ".dvc", host / ".dvc", ignore=shutil.ignore_patterns("cache", "tmp", "site-cache", "config.local"))
    shutil.copy(ROOT / "params.yaml", host / "params.yaml")
    (host / "selfevolve" / "x.py").write_text("X = 1\n")
    (host / "dvc.lock").write_text("schema: '2.0'\nstages:\n  rewards@c2:\n    cmd: selfevolve rewards --cycle c2\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "campaign"]):
        subprocess.run(cmd, cwd=host, check=True, capture_output=True)
    dest = make_project(tmp_path / "project", source=host)
    assert (dest / "selfevolve" / "x.py").read_text() == "X = 1\n" and (dest / "params.yaml").exists()
    assert not (dest / "dvc.lock").exists()
    assert "dvc.lock" not in subprocess.run(["git", "ls-files"], cwd=dest, capture_output=True, text=True).stdout
