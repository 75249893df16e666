"""Local services on 127.0.0.1: a Prefect server, a Prefect process worker and an MLflow tracking
server, started as child processes and stopped by PID. Used by ``selfevolve stack`` (``make serve``)
and by the integration tests (which start their own on free ports).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_env(extra: dict | None = None) -> dict[str, str]:
    """The environment for service processes: analytics/telemetry off, offline hubs, venv on PATH."""
    from selfevolve.runtime_env import DEFAULTS

    env = dict(os.environ)
    env.update(DEFAULTS)
    env.update({"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    env.update(extra or {})
    return env


def wait_http(url: str, timeout_s: float = 90.0, proc: subprocess.Popen | None = None) -> None:
    """Poll ``url`` until it answers 200. Raises ``RuntimeError`` on timeout or if ``proc`` exits."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with code {proc.returncode}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s")


def stop(proc: subprocess.Popen | None, timeout_s: float = 15.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL after ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)


@dataclass
class Stack:
    """Running services; ``close()`` stops them in reverse order (worker before server)."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for p in reversed(self.procs):
            stop(p)
        self.procs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _spawn(args: list[str], env: dict, cwd: Path, log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "ab")
    return subprocess.Popen(args, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def start_mlflow(stack: Stack, root: Path, port: int | None = None, store: Path | None = None) -> str:
    """``mlflow server`` on 127.0.0.1 with a sqlite store and local artifacts; returns its URL."""
    port = port or free_port()
    store = store or root / "mlflow"
    store.mkdir(parents=True, exist_ok=True)
    proc = _spawn([str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
                   "--artifacts-destination", str(store / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                  quiet_env(), root, root / ".services" / "mlflow.log")
    stack.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", proc=proc)
    stack.urls["mlflow"] = url
    return url


def start_prefect(stack: Stack, root: Path, port: int | None = None, home: Path | None = None) -> str:
    """``prefect server start`` on 127.0.0.1 with its own PREFECT_HOME; returns the API URL."""
    port = port or free_port()
    home = home or root / ".prefect"
    env = quiet_env({"PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"})
    proc = _spawn([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, root,
                  root / ".services" / "prefect-server.log")
    stack.procs.append(proc)
    api = f"http://127.0.0.1:{port}/api"
    wait_http(f"{api}/health", proc=proc)
    stack.urls["prefect"] = api
    stack.env.update({"PREFECT_HOME": str(home), "PREFECT_API_URL": api})
    return api


def deploy(stack: Stack, root: Path, pools: tuple[str, ...] = ("cpu", "gpu")) -> None:
    """Create the process work pools and register every deployment of ``prefect.yaml``."""
    env = quiet_env({**stack.env, "SELFEVOLVE_ROOT": str(root)})
    for pool in pools:
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", pool, "--type", "process", "--overwrite"], env=env, cwd=root,
                       check=True, capture_output=True)
    r = subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env=env, cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"prefect deploy failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def start_worker(stack: Stack, root: Path, pool: str = "cpu", extra_env: dict | None = None) -> subprocess.Popen:
    """A Prefect process worker polling ``pool``."""
    env = quiet_env({**stack.env, "SELFEVOLVE_ROOT": str(root), **(extra_env or {})})
    proc = _spawn([str(BIN / "prefect"), "worker", "start", "--pool", pool, "--type", "process"], env, root,
                  root / ".services" / f"prefect-worker-{pool}.log")
    stack.procs.append(proc)
    return proc
