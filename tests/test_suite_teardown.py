"""The suite's own hygiene: a pytest run stopped by SIGTERM (``timeout``, a cancelled CI job) still
tears its fixtures down, so servers a module fixture started in their own process group stop."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_sigterm_tears_the_module_fixtures_down(tmp_path):
    """A test module that starts a child in its own session from a module fixture (as
    ``services.Stack`` does) and sleeps; SIGTERM to pytest mid-test: the fixture's teardown runs
    and stops the child. Without the handler in conftest.py the teardown never runs (checked:
    the marker file is missing and the child outlives pytest)."""
    marker, pidfile = tmp_path / "torn_down", tmp_path / "child.pid"
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_sleeper.py").write_text(f'''
import subprocess, sys, time
from pathlib import Path
import pytest

@pytest.fixture(scope="module")
def server():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    Path({str(pidfile)!r}).write_text(str(child.pid))
    yield child
    child.kill()
    child.wait()
    Path({str(marker)!r}).write_text("done")

def test_sleeps(server):
    time.sleep(120)
''')
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not pidfile.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert pidfile.exists(), proc.communicate(timeout=30)[0][-2000:]
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert marker.read_text() == "done", out[-2000:]
    child = int(pidfile.read_text())
    assert subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True).stdout.strip() in ("", "Z")
