"""A stage DVC recomputed and one it did not (unchanged, or restored from its run cache) end in
different Prefect states: ``Completed`` and ``Cached``. The flow knows which from the stage
command itself, which writes ``RAN_MARKER_ENV``'s file only when DVC runs it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import tasks.repro
from selfevolve.stages.placement import RAN_MARKER_ENV

ROOT = Path(__file__).resolve().parents[1]

#: Stands in for a stage command: honours the marker as ``selfevolve <stage>`` does, then computes.
STAND_IN = f"""import os, pathlib
marker = os.environ.get({RAN_MARKER_ENV!r})
if marker:
    pathlib.Path(marker).write_text("make")
pathlib.Path("out.txt").write_text(pathlib.Path("in.txt").read_text() * 2)
"""


@pytest.fixture()
def dvc_project(tmp_path, monkeypatch):
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True,
                   env={"DVC_NO_ANALYTICS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    (tmp_path / "make.py").write_text(STAND_IN)
    (tmp_path / "in.txt").write_text("1")
    stage = {"cmd": f"{sys.executable} make.py", "deps": ["make.py", "in.txt"], "outs": ["out.txt"]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"make": stage}}))
    monkeypatch.setattr(tasks.repro, "get_run_logger", lambda: logging.getLogger("test"))  # no flow run here
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_reproduce_says_whether_dvc_ran_the_stage_command(dvc_project):
    out = dvc_project / "out.txt"
    assert tasks.repro.reproduce("make", dvc_project) is True and out.read_text() == "11"
    assert tasks.repro.reproduce("make", dvc_project) is False  # unchanged: skipped
    out.unlink()
    assert tasks.repro.reproduce("make", dvc_project) is False and out.read_text() == "11"  # from the run cache
    (dvc_project / "in.txt").write_text("2")
    assert tasks.repro.reproduce("make", dvc_project) is True and out.read_text() == "22"


def test_outcome_states():
    ran, cached = tasks.repro.outcome("solve@c1", True, "x"), tasks.repro.outcome("solve@c1", False, "x")
    assert ran.is_completed() and cached.is_completed()
    assert (ran.name, cached.name) == ("Completed", "Cached")
    assert "recomputed" in ran.message and "not recomputed" in cached.message


def test_stage_commands_write_the_marker_before_computing(tmp_path, monkeypatch):
    import selfevolve.stages.runner
    from selfevolve.cli.stages import run_stage_or_fail
    from selfevolve.stages.registry import get

    ran = []
    monkeypatch.setattr(selfevolve.stages.runner, "execute", lambda stage, p, cycle, root, **kw: ran.append(stage.name) or {})
    marker = tmp_path / "ran"
    monkeypatch.setenv(RAN_MARKER_ENV, str(marker))
    run_stage_or_fail(get("solve"), "c1", ROOT / "params.yaml", None, tmp_path, track=False)
    assert ran == ["solve"] and marker.read_text() == "solve@c1"
    marker.unlink()
    monkeypatch.delenv(RAN_MARKER_ENV)
    run_stage_or_fail(get("seeds"), None, ROOT / "params.yaml", None, tmp_path, track=False)
    assert ran == ["solve", "seeds"] and not marker.exists()
