"""A campaign stopped by a signal leaves nothing running: the stage it was in runs in its own process
group, and SIGTERM or SIGINT of the flow process stops that whole group (`make run` is
``python -m flows.campaign``, which turns SIGTERM into the same unwinding as Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from selfevolve.orchestration import services

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import signal, sys
    from prefect import flow
    from flows.campaign import handle_stop_signals
    from tasks.repro import run_logged

    @flow(name="signal-test")
    def stage_like(marker: str) -> None:
        # a stage whose command leaves a grandchild, as `dvc repro` -> `selfevolve <stage>` does
        run_logged(["bash", "-c", f"sleep 600 {marker} & sleep 600 {marker}; wait"], ".", "sleeper")

    handle_stop_signals()  # as `python -m flows.campaign` does
    print("ready", flush=True)
    stage_like(sys.argv[1])
""")


def _sleepers(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.info["cmdline"] and p.info["cmdline"][0] == "sleep" and marker in p.info["cmdline"]:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_flow_stops_the_running_stage_and_its_children(tmp_path, sig):
    marker = f"{os.getpid()}{sig.value}"  # sleep accepts several operands: this one marks our processes
    script = tmp_path / "flow_script.py"
    script.write_text(SCRIPT)
    env = services.quiet_env({"PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)})
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, str(script), marker], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(_sleepers(marker)) < 2:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.5)
        sleepers = _sleepers(marker)
        assert len(sleepers) == 2, "the stage's processes did not start"
        assert all(os.getpgid(p.pid) != os.getpgid(proc.pid) for p in sleepers)  # the stage has its own group
        proc.send_signal(sig)
        proc.wait(60)
        gone, alive = psutil.wait_procs(sleepers, timeout=30)
        assert not alive, f"left running after {sig.name}: {[p.pid for p in alive]}"
    finally:
        for p in _sleepers(marker):
            p.kill()
        if proc.poll() is None:  # failed: kill the flow with its temporary Prefect server, not just the flow
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
            for p in children:
                p.kill()
            proc.kill()
