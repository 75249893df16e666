"""Local services on 127.0.0.1: a Prefect server, a Prefect process worker and an MLflow tracking
server, started as child processes and stopped by PID. Used by ``selfevolve stack`` (``make serve``)
and by the integration tests (which start their own on free ports).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from selfevolve.orchestration.processes import stop_group

BIN = Path(sys.executable).parent
#: A stage flow run that sends no heartbeat for this long is marked Crashed (and resubmitted):
#: three missed heartbeats (runtime_env sets ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` to 30 s).
ZOMBIE_AFTER_S = 90


class ServiceUnreachable(RuntimeError):
    """A DVC remote or tracking server this machine must reach is not reachable (the message names it)."""


def check_dvc_remote(root: str | Path) -> str:
    """The default DVC remote of the checkout ``root`` must be configured and reachable from this
    machine (a local folder is created if missing). Returns its URL. Raises ``ServiceUnreachable``
    naming the remote and the host."""
    from dvc.repo import Repo

    host = socket.gethostname()
    with Repo(str(root)) as repo:
        name = repo.config["core"].get("remote")
        if not name:
            raise ServiceUnreachable(f"{host}: no default DVC remote in {root}; add the one the flow and the workers share: "
                                     "`dvc remote add -d --local NAME URL`")
        url = repo.config["remote"].get(name, {}).get("url")
        if not url:
            raise ServiceUnreachable(f"{host}: DVC remote {name!r} has no url in {root}")
        try:
            r = repo.cloud.get_remote(name)
            if r.fs.protocol in ("local", "file"):
                Path(r.path).mkdir(parents=True, exist_ok=True)
            else:
                r.fs.ls(r.fs.parent(r.path))
        except Exception as exc:  # any filesystem error means the remote is unreachable from here
            raise ServiceUnreachable(f"{host} cannot reach DVC remote {name!r} ({url}): {exc}") from exc
    return str(url)


def check_tracking_server(uri: str | None) -> str:
    """The MLflow tracking server ``uri`` must answer ``/health`` from this machine. Returns it.
    Raises ``ServiceUnreachable`` naming it, also when ``uri`` is not an http(s) server (a worker
    never logs to a local store the flow cannot read)."""
    host = socket.gethostname()
    if not uri or not uri.startswith(("http://", "https://")):
        raise ServiceUnreachable(f"{host}: no MLflow tracking server (MLFLOW_TRACKING_URI={uri!r}); set "
                                 "MLFLOW_TRACKING_URI=http://HOST:PORT of the campaign's server")
    try:
        ok = httpx.get(f"{uri.rstrip('/')}/health", timeout=10).status_code == 200
    except httpx.HTTPError as exc:
        raise ServiceUnreachable(f"{host} cannot reach the MLflow tracking server {uri}: {exc}") from exc
    if not ok:
        raise ServiceUnreachable(f"{host}: the MLflow tracking server {uri} is not healthy (/health)")
    return uri


def summary_artifact_key(campaign: str) -> str:
    """The key of the campaign flow's summary artifact in Prefect: ``<campaign>-summary`` in the
    lowercase letters, digits and dashes Prefect allows."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{campaign}-summary".lower())


def campaign_records(api_url: str, campaign: str) -> dict[str, str | None]:
    """What the Prefect server at ``api_url`` (``http://host:port/api``) holds of a campaign: the id of
    its newest ``campaign`` flow run (``flow_run``) and of its newest summary artifact (``summary``),
    None where there is none. Raises ``httpx.HTTPError`` when the server does not answer."""
    runs = httpx.post(f"{api_url}/flow_runs/filter", json={"flows": {"name": {"any_": ["campaign"]}}, "sort": "START_TIME_DESC",
                                                          "limit": 1}, timeout=30)
    arts = httpx.post(f"{api_url}/artifacts/filter", json={"artifacts": {"key": {"any_": [summary_artifact_key(campaign)]}},
                                                          "sort": "CREATED_DESC", "limit": 1}, timeout=30)
    runs.raise_for_status()
    arts.raise_for_status()
    return {"flow_run": runs.json()[0]["id"] if runs.json() else None, "summary": arts.json()[0]["id"] if arts.json() else None}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_env(extra: dict | None = None) -> dict[str, str]:
    """The environment for service processes: analytics/telemetry off, offline hubs, venv on PATH."""
    from selfevolve.runtime_env import wait_defaults

    env = dict(os.environ)
    env.update(wait_defaults(env))
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


@dataclass
class Stack:
    """Running services; ``close()`` stops them in reverse order (worker before server)."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for p in reversed(self.procs):
            stop_group(p, 15.0)
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


#: The process work pools prefect.yaml's deployments use: stages by resource class, and the head
#: pool where the campaign flow itself runs when submitted to the cluster.
POOLS = ("cpu", "gpu", "head")


def deploy(stack: Stack | None, root: Path, pools: tuple[str, ...] = POOLS, zombie_after_s: float = ZOMBIE_AFTER_S) -> None:
    """Create the process work pools, register every deployment of ``prefect.yaml`` and the
    automation that marks a flow run Crashed after ``zombie_after_s`` without a heartbeat (a worker
    machine that died), against ``stack``'s server or ``PREFECT_API_URL``. Raises ``RuntimeError``
    with Prefect's output when a step fails."""
    env = quiet_env({**(stack.env if stack else {}), "SELFEVOLVE_ROOT": str(root)})
    for pool in pools:
        r = subprocess.run([str(BIN / "prefect"), "work-pool", "create", pool, "--type", "process", "--overwrite"], env=env, cwd=root,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"prefect work-pool create {pool} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    r = subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env=env, cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"prefect deploy failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    r = subprocess.run([sys.executable, "-c", f"from selfevolve.orchestration.services import create_zombie_automation as c; c({zombie_after_s})"],
                       env=env, cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"creating the zombie-detection automation failed:\n{r.stderr[-3000:]}")


ZOMBIE_AUTOMATION = "selfevolve: crash flow runs without heartbeats"


def create_zombie_automation(after_s: float = ZOMBIE_AFTER_S) -> None:
    """Prefect's zombie detection (docs: "Detect zombie flows"): after each heartbeat of a flow run,
    expect another event of it within ``after_s`` seconds, else mark it Crashed. Replaces an earlier
    automation of the same name. Uses ``PREFECT_API_URL``."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    try:
        Automation.read(name=ZOMBIE_AUTOMATION).delete()
    except ValueError:
        pass
    Automation(
        name=ZOMBIE_AUTOMATION,
        trigger=EventTrigger(after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.*"},
                             match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
                             for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
                             within=timedelta(seconds=after_s)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=f"no heartbeat for {after_s:.0f} s: its worker is gone")],
    ).create()


def worker_args(pool: str, limit: int | None = None, name: str | None = None) -> list[str]:
    """``prefect worker start`` for a process worker polling ``pool`` (at most ``limit`` runs at once)."""
    return [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--type", "process",
            *(["--limit", str(limit)] if limit else []), *(["--name", name] if name else [])]


def start_worker(stack: Stack, root: Path, pool: str = "cpu", extra_env: dict | None = None) -> subprocess.Popen:
    """A Prefect process worker polling ``pool``, running flows in the checkout ``root`` (cluster
    workers are started with ``selfevolve worker``, one stage at a time)."""
    env = quiet_env({**stack.env, "SELFEVOLVE_ROOT": str(root), **(extra_env or {})})
    proc = _spawn(worker_args(pool), env, root, root / ".services" / f"prefect-worker-{pool}.log")
    stack.procs.append(proc)
    return proc
