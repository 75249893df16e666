"""Child processes that run in their own process group (started with ``start_new_session=True``),
so stopping one stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen | None, timeout_s: float = 15.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL it if ``proc`` has not exited after
    ``timeout_s`` seconds. Returns at once when ``proc`` is None or has exited; never raises for a
    group that is already gone."""
    if proc is None or proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout_s if sig == signal.SIGTERM else 5)
            return
        except subprocess.TimeoutExpired:
            continue
