"""Scale-out on one machine (loopback): one Prefect server, one MLflow server, a DVC remote in a
temporary folder, and workers in separate clones of the project, one per pool, as if on separate
machines. The campaign flow (deployment ``campaign/cluster`` on the head pool) sends every stage to
a worker of its pool; its ``dvc.lock`` and outputs equal those of a plain ``dvc repro`` of the
same cycle. Then a worker is killed (SIGKILL, with everything it started) in the middle of a
stage: the stage runs again on the pool's other worker, no finished stage runs again, and the
outputs still equal the undisturbed ones.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from helpers import BIN, dvc, make_project, wait_for
from selfevolve.orchestration import services

pytestmark = pytest.mark.slow
ZOMBIE_AFTER_S = 60


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def _clone(head: Path, dest: Path, remote: Path) -> Path:
    """A worker's 'machine': its own clone of the head project, pointed at the shared remote."""
    subprocess.run(["git", "clone", "-q", str(head), str(dest)], check=True)
    dvc(dest, "config", "--local", "core.site_cache_dir", str(dest / ".dvc" / "site-cache"))
    dvc(dest, "remote", "modify", "--local", "local", "url", str(remote))
    return dest


def _flow_runs(api: str, flow: str) -> list[dict]:
    r = httpx.post(f"{api}/flow_runs/filter", json={"flows": {"name": {"any_": [flow]}}, "sort": "START_TIME_ASC", "limit": 200},
                   timeout=30)
    r.raise_for_status()
    return r.json()


def _campaign(env: dict, head: Path, cycles: int) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "prefect"), "deployment", "run", "campaign/cluster", "-p", f"cycles={cycles}", "--watch",
                           "--watch-timeout", "1500"], cwd=head, env=env, capture_output=True, text=True, timeout=1600)


def _logs(*roots: Path) -> str:
    out = []
    for root in roots:
        for f in sorted((root / ".services").glob("*.log")):
            out.append(f"==== {f}\n{f.read_text(errors='replace')[-5000:]}")
    return "\n".join(out)


def _worker(stack: services.Stack, root: Path, pool: str, env: dict) -> subprocess.Popen:
    """`selfevolve worker --pool POOL` in ``root``, as the README starts one on each machine."""
    (root / ".services").mkdir(exist_ok=True)
    log = open(root / ".services" / f"worker-{pool}.log", "ab")
    proc = subprocess.Popen([str(BIN / "selfevolve"), "worker", "--pool", pool, "--root", str(root), "--name", f"{pool}-{root.name}"],
                            cwd=root, env=services.quiet_env({**stack.env, **env}), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    stack.procs.append(proc)
    return proc


def _reference(ref: Path, target: str) -> None:
    dvc(ref, "repro", target, env=services.quiet_env())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    head = make_project(base / "head")
    params = yaml.safe_load((head / "params.yaml").read_text())
    params["campaign"] = "cluster"
    params["placement"]["dispatch"] = "pools"
    (head / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _git(head, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "dispatch to the pools")
    remote = base / "dvc-remote"
    dvc(head, "remote", "modify", "--local", "local", "url", str(remote))
    gpu1, cpu1 = _clone(head, base / "gpu1", remote), _clone(head, base / "cpu1", remote)
    # the undisturbed reference: a plain `dvc repro` of the same commit, no remote, computed meanwhile
    ref = _clone(head, base / "ref", base / "unused-remote")
    ref_c1 = threading.Thread(target=_reference, args=(ref, "evaluate@c1"))
    with services.Stack() as stack:
        mlflow = services.start_mlflow(stack, head, store=base / "mlflow-server")
        api = services.start_prefect(stack, head, home=base / "prefect-home")
        tracking = {"MLFLOW_TRACKING_URI": mlflow}
        env = services.quiet_env({**stack.env, **tracking})
        r = subprocess.run([str(BIN / "selfevolve"), "deploy", "--root", str(head), "--zombie-after", str(ZOMBIE_AFTER_S)], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        for root, pool in ((head, "head"), (gpu1, "gpu"), (cpu1, "cpu")):
            _worker(stack, root, pool, tracking)
        ref_c1.start()
        t0 = time.time()
        r = _campaign(env, head, 1)
        ref_c1.join()
        assert r.returncode == 0 and "Completed" in r.stdout, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{_logs(head, gpu1, cpu1)}"
        yield {"head": head, "ref": ref, "remote": remote, "api": api, "mlflow": mlflow, "env": env, "stack": stack,
               "workers": {"gpu1": gpu1, "cpu1": cpu1}, "seconds": time.time() - t0, "base": base, "tracking": tracking}


def _lock_stages(root: Path) -> dict:
    """dvc.lock's stages, without the metrics files' hashes (they hold the stage's wall time)."""
    stages = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    for entry in stages.values():
        entry["outs"] = [o for o in entry["outs"] if not o["path"].startswith("metrics/")]
    return stages


def test_two_workers_one_per_pool_make_what_dvc_repro_makes(cluster):
    head, ref = cluster["head"], cluster["ref"]
    flow_lock, ref_lock = _lock_stages(head), _lock_stages(ref)
    assert set(flow_lock) == set(ref_lock) and "evaluate@c1" in flow_lock
    for stage_id in ref_lock:
        assert flow_lock[stage_id] == ref_lock[stage_id], stage_id
    for f in ("attempts.jsonl", "verdicts.jsonl", "pool.jsonl", "eval/heldout.jsonl"):
        assert (head / "data/cycles/c1" / f).read_bytes() == (ref / "data/cycles/c1" / f).read_bytes(), f
    assert json_status(head, "--with-deps", "evaluate@c1") == {}
    # every stage ran on a worker of its pool, each in its own clone
    runs = [r for r in _flow_runs(cluster["api"], "stage") if r["state_type"] == "COMPLETED"]
    pools = {r["name"].split("#")[0]: r["work_pool_name"] for r in runs}
    assert pools["solve@c1"] == "gpu" and pools["verify@c1"] == "cpu" and pools["train_rl@c1"] == "gpu"
    assert set(pools) == set(ref_lock)
    # and logged to the one MLflow server
    from mlflow.tracking import MlflowClient

    client = MlflowClient(cluster["mlflow"])
    exp = client.get_experiment_by_name("cluster")
    stages = {(r.data.tags["selfevolve.cycle"], r.data.tags["selfevolve.stage"]) for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("selfevolve.kind") == "stage"}
    assert {("c1", "solve"), ("c1", "verify"), ("base", "bootstrap")} <= stages


def json_status(root: Path, *targets: str) -> dict:
    import json

    return json.loads(dvc(root, "status", "--json", *targets).stdout)


def _stage_run_open(mlflow: str, cycle: str, stage: str) -> bool:
    """Whether the stage's MLflow run is open (the stage opens it as it starts and closes it as it ends)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow)
    exp = client.get_experiment_by_name("cluster")
    flt = f"tags.`selfevolve.stage` = '{stage}' and tags.`selfevolve.cycle` = '{cycle}'"
    return any(r.info.status == "RUNNING" for r in client.search_runs([exp.experiment_id], flt))


def _kill_machine(pid: int) -> list[int]:
    """SIGKILL a worker and everything it started (the stage's process group included)."""
    worker = psutil.Process(pid)
    procs = [worker, *worker.children(recursive=True)]
    groups = {os.getpgid(p.pid) for p in procs if p.is_running()}
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    for g in groups:  # a stage command started in its own session by the flow run
        try:
            os.killpg(g, 9)
        except ProcessLookupError:
            pass
    return [p.pid for p in procs]


def test_a_worker_killed_mid_stage_costs_only_that_stage(cluster):
    head, api = cluster["head"], cluster["api"]
    gpu2 = _clone(head, cluster["base"] / "gpu2", cluster["remote"])
    second = _worker(cluster["stack"], gpu2, "gpu", cluster["tracking"])
    ref_c2 = threading.Thread(target=_reference, args=(cluster["ref"], "evaluate@c2"))
    ref_c2.start()
    before = {r["id"] for r in _flow_runs(api, "stage")}
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(r=_campaign(cluster["env"], head, 2)))
    t.start()
    victim, killed = "solve@c2", None
    deadline = time.time() + 900
    while time.time() < deadline and t.is_alive() and killed is None:
        for r in _flow_runs(api, "stage"):
            if r["name"] == f"{victim}#1" and r["state_type"] == "RUNNING" and r.get("infrastructure_pid"):
                if wait_for(lambda: _stage_run_open(cluster["mlflow"], "c2", "solve"), 300):  # inside the stage
                    pid = int(r["infrastructure_pid"].split(":")[-1])
                    worker_pid = psutil.Process(pid).ppid()
                    killed = (worker_pid, _kill_machine(worker_pid))
                break
        time.sleep(1)
    t.join()
    ref_c2.join()
    r = result["r"]
    assert killed is not None, "the stage was never seen running with its MLflow run open"
    assert r.returncode == 0 and "Completed" in r.stdout, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{_logs(head, gpu2)}"
    new = [x for x in _flow_runs(api, "stage") if x["id"] not in before]
    names = [x["name"] for x in new]
    assert f"{victim}#2" in names and [x["state_type"] for x in new if x["name"] == f"{victim}#1"] == ["CRASHED"]
    # nothing of base or c1 was sent again; every other c2 stage ran once
    assert all(n.split("#")[0].endswith("@c2") for n in names), names
    assert sorted(n for n in names if n.split("#")[0] != victim) == sorted({n for n in names if n.split("#")[0] != victim})
    for stage_id, entry in _lock_stages(cluster["ref"]).items():
        assert _lock_stages(head)[stage_id] == entry, stage_id
    assert second.poll() is None or killed[0] == second.pid
