"""The adversarial corpus (tests/adversarial/*.py) against the sandbox.

Every program runs in three configurations:
  * ``full``: the default sandbox (kernel features probed here + the audit-hook policy);
  * ``kernel``: kernel features only (``audit=False``), to show the OS layer holds by itself
    (skipped where the kernel features are not available);
  * ``audit``: no kernel features (``features=[]``), the fallback of machines without namespaces.
For each: nothing is reported as passed, the call returns within its deadline, the host is unchanged
(canaries intact, no files outside tmp dirs, nothing reached the local listener, a victim process
and the test process are alive, no secret in any output), and no process of the job is left.
"""

from __future__ import annotations

import glob
import os
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from selfevolve.verifiers.sandbox import CodeJob, SandboxPool, _parse_frames, shutdown_default_pool
from selfevolve.verifiers.sandbox_zygote import wall_backstop_s

ADV_DIR = Path(__file__).parent / "adversarial"
PROGRAMS = sorted(p.stem for p in ADV_DIR.glob("*.py") if p.name != "conftest.py")
PROJECT = Path(__file__).resolve().parents[1]
NONCE = uuid.uuid4().hex[:12]
SECRET_NAME = "SELFEVOLVE_TEST_SECRET"
SECRET_VALUE = "s3cr3t-" + uuid.uuid4().hex
TESTS = ["assert solve() == 42", "assert abs(solve() - 42) < 1e-9"]
TIMEOUT_S = 2.0

# what each program may end as (never "passed")
EXPECTED = {
    "deep_recursion": {"memory", "timeout", "error", "failed"},
    "deep_recursion_c": {"memory", "timeout", "error", "failed"},
    "delete_files": {"failed"},
    "env_secrets": {"failed"},
    "eq_always_true": {"failed"},
    "exit_inside_function": {"failed"},
    "fake_marker": {"failed"},
    "fd_tricks": {"failed", "error"},
    "fork_bomb": {"failed"},
    "huge_output": {"failed", "error"},
    "infinite_loop": {"timeout"},
    "introspection": {"failed"},
    "kill_parent": {"failed", "error"},
    "memory_bomb": {"memory"},
    "monkeypatch_builtins": {"failed"},
    "network": {"failed"},
    "os_exit": {"error"},
    "os_system": {"failed", "error"},
    "signals": {"failed", "error"},
    "sleep_forever": {"timeout"},
    "sys_exit": {"failed"},
    "threads": {"failed", "error", "timeout"},
    "write_outside": {"failed"},
}
# "ESCAPED: ..." lines that are not escapes in a given configuration
INSIDE_ONLY = {
    # writes land in the job's own private tmpfs; frames are only readable inside the job's process
    "kernel": {"write_outside", "introspection"},
    # as root without a uid of its own, RLIMIT_NPROC does not stop threads (they die with the job)
    "audit": {"threads"} if os.geteuid() == 0 else set(),
    "full": set(),
}


def test_corpus_is_complete():
    assert set(PROGRAMS) == set(EXPECTED), "every adversarial program needs an expected outcome"
    for name in PROGRAMS:
        doc = (ADV_DIR / f"{name}.py").read_text().lstrip()
        assert doc.startswith('"""'), f"{name}.py must say what it attempts in its docstring"


class Listener:
    """TCP and UDP on 127.0.0.1 (same port); records whatever arrives."""

    def __init__(self):
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.udp.settimeout(0.2)
        self.events: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True),
                         threading.Thread(target=self._recv, daemon=True)]
        for t in self._threads:
            t.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, addr = self.tcp.accept()
            except OSError:
                continue
            self.events.append(f"tcp connection from {addr}")
            conn.settimeout(1)
            try:
                data = conn.recv(1024)
                if data:
                    self.events.append(f"tcp data {data!r}")
            except OSError:
                pass
            conn.close()

    def _recv(self):
        while not self._stop.is_set():
            try:
                data, addr = self.udp.recvfrom(1024)
            except OSError:
                continue
            self.events.append(f"udp data {data!r} from {addr}")

    def close(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self.tcp.close()
        self.udp.close()


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The host-side world the programs attack, plus the pools (started after the secret is set,
    so a leak through the environment would show). The process-wide default pool, which an earlier
    test of the session may have left warm (grading MBPP or HumanEval through ``run_tests_batch``),
    is stopped first: its zygotes would count as strays (``pytest -m slow`` failed 69 cases so)."""
    shutdown_default_pool()
    old = os.environ.get(SECRET_NAME)
    os.environ[SECRET_NAME] = SECRET_VALUE
    canary_dir = tmp_path_factory.mktemp("canary")
    canary = canary_dir / "canary.txt"
    canary.write_text("canary " + NONCE)
    visible_dir = Path(tempfile.mkdtemp(prefix="selfevolve-canary-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    visible = visible_dir / "canary.txt"
    visible.write_text("visible canary " + NONCE)
    victim = subprocess.Popen(["sleep", "600"], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                     SECRET_NAME: SECRET_VALUE})
    listener = Listener()
    pools = {"full": SandboxPool(max_workers=2), "kernel": SandboxPool(max_workers=1, audit=False),
             "audit": SandboxPool(max_workers=1, features=[])}
    state = {"canary": canary, "visible": visible, "victim": victim, "listener": listener, "pools": pools,
             "snap": {p: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in (canary, visible)}}
    try:
        yield state
    finally:
        for pool in pools.values():
            pool.close()
        listener.close()
        victim.kill()
        victim.wait(timeout=10)
        for p in _pwned_paths():
            try:
                os.remove(p)
            except OSError:
                pass
        import shutil

        shutil.rmtree(visible_dir, ignore_errors=True)
        if old is None:
            os.environ.pop(SECRET_NAME, None)
        else:
            os.environ[SECRET_NAME] = old


def _pwned_paths() -> list[str]:
    out = []
    for d in ("/tmp", "/var/tmp", "/dev/shm", str(PROJECT), os.path.expanduser("~"), tempfile.gettempdir()):
        out += glob.glob(os.path.join(d, f"pwned_{NONCE}*"))
    return sorted(set(out))


def _source(name: str, host) -> str:
    src = (ADV_DIR / f"{name}.py").read_text()
    subs = {"__NONCE__": NONCE, "__PORT__": str(host["listener"].port), "__CANARY__": str(host["canary"]),
            "__VISIBLE_CANARY__": str(host["visible"]), "__CANARY_DIR__": str(host["canary"].parent),
            "__PROJECT__": str(PROJECT), "__HOME__": os.path.expanduser("~"), "__TEST_PID__": str(os.getpid()),
            "__VICTIM_PID__": str(host["victim"].pid), "__SECRET_NAME__": SECRET_NAME}
    for k, v in subs.items():
        src = src.replace(k, v)
    return src


def _job_descendants(pools) -> list[psutil.Process]:
    out = []
    for pool in pools:
        for pid in pool.helper_pids():
            try:
                out += psutil.Process(pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
    return out


def assert_no_strays(pools, keep: set[int] = frozenset()) -> None:
    """No process of a job survives it: the zygotes have no children, and every child of this
    test process is a zygote of one of ``pools`` (or in ``keep``, e.g. the victim)."""
    deadline = time.monotonic() + 5
    while True:
        helpers = {pid for pool in pools for pid in pool.helper_pids()}
        ours = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in helpers and p.pid not in keep and not _is_math_grader(p)]
        strays = _job_descendants(pools) + ours
        if not strays or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not strays, [(p.pid, _cmd(p)) for p in strays]


def _is_math_grader(p: psutil.Process) -> bool:
    """The math verifier's worker pool, which earlier tests of the session may have left warm
    (it lives for the session by design and never runs untrusted code)."""
    return "from selfevolve.verifiers.math_worker import" in _cmd(p, 200)


def _cmd(p: psutil.Process, width: int = 80) -> str:
    try:
        return " ".join(p.cmdline())[:width]
    except psutil.Error:
        return "?"


def _pool_for(host, mode: str) -> SandboxPool:
    pool = host["pools"][mode]
    caps = pool.capabilities()["features"]
    if mode == "kernel":
        own_uid_or_pid = "uid" in caps or ("userns" in caps and "pid" in caps)
        if not ({"mount", "net"} <= set(caps) and own_uid_or_pid):
            pytest.skip(f"kernel isolation features unavailable here ({caps}); the audit layer is tested instead")
    return pool


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["full", "kernel", "audit"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_adversarial_program_is_contained(name, mode, host):
    pool = _pool_for(host, mode)
    job = CodeJob(program=_source(name, host), tests=TESTS, timeout_s=TIMEOUT_S, memory_mb=256)
    t0 = time.monotonic()
    res = pool.run(job)
    elapsed = time.monotonic() - t0

    # never reported as passed, per test or overall
    assert not res.passed, res
    assert not any(t.passed for t in res.tests), res.tests
    assert res.status in EXPECTED[name], (res.status, res.detail)
    assert len(res.tests) == len(TESTS)
    # bounded: CPU time by RLIMIT_CPU, waiting by the wall-clock backstop; allow scheduling slack on a loaded machine
    assert elapsed < wall_backstop_s(TIMEOUT_S) + 5, elapsed
    # nothing the program tried got out
    escaped = [ln for ln in (res.stdout_tail + res.stderr_tail).splitlines() if ln.startswith("ESCAPED")]
    if name not in INSIDE_ONLY[mode]:
        assert not escaped, escaped
    texts = [res.stdout_tail, res.stderr_tail, res.detail] + [t.error or "" for t in res.tests] + \
            [t.output or "" for t in res.tests]
    assert not any(SECRET_VALUE in t for t in texts), "secret leaked into the job's output"
    # the host is unchanged
    assert _pwned_paths() == [], _pwned_paths()
    for p, (data, mode_bits) in host["snap"].items():
        assert p.read_bytes() == data and stat.S_IMODE(p.stat().st_mode) == mode_bits, f"{p} was modified"
    time.sleep(0.05)
    assert host["listener"].events == [], host["listener"].events
    assert host["victim"].poll() is None, "the victim process was killed"
    assert_no_strays(list(host["pools"].values()), {host["victim"].pid})
    # and the sandbox still works afterwards
    ok = pool.run(CodeJob(program="def solve():\n    return 42\n", tests=TESTS, timeout_s=TIMEOUT_S))
    assert ok.passed, ok


@pytest.mark.timeout(60)
def test_eq_always_true_passes_without_strict_equality(host):
    """Documented limit: with ``strict_equality=False`` an object whose ``__eq__`` always answers
    True passes ``assert f(x) == y`` (the assert did complete). Strict mode (default) rejects it."""
    pool = host["pools"]["full"]
    src = _source("eq_always_true", host)
    loose = pool.run(CodeJob(program=src, tests=["assert solve() == 42"], strict_equality=False))
    assert loose.passed
    strict = pool.run(CodeJob(program=src, tests=["assert solve() == 42"]))
    assert strict.status == "failed" and "StrictEqualityError" in (strict.tests[0].error or "")


@pytest.mark.timeout(60)
def test_forged_frames_without_the_nonce_are_ignored():
    import marshal
    import struct

    nonce = os.urandom(16)
    body = marshal.dumps(("F", None, [(True, None, None)], False, []))
    forged = b"\x00" * 16 + struct.pack("<I", len(body)) + body
    real = nonce + struct.pack("<I", len(body)) + body
    assert _parse_frames(forged, nonce) == []
    assert _parse_frames(b"garbage" + forged + real + b"\xff" * 10, nonce) == [("F", None, [(True, None, None)], False, [])]
    assert _parse_frames(real[:-3], nonce) == []


@pytest.mark.timeout(120)
def test_no_process_left_after_timeouts_and_pool_close(host):
    """Kill on timeout reaches the whole job; closing a pool leaves no child processes."""
    pool = SandboxPool(max_workers=2)
    try:
        jobs = [CodeJob(program="import time\ntime.sleep(100)\n", tests=["assert True"], timeout_s=1.0),
                CodeJob(program="while True:\n    pass\n", tests=["assert True"], timeout_s=1.0)]
        for res in pool.run_batch(jobs):
            assert res.status == "timeout", res
        assert_no_strays([pool, *host["pools"].values()], {host["victim"].pid})
        zygotes = pool.helper_pids()
        assert zygotes
    finally:
        pool.close()
    for pid in zygotes:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.timeout(120)
def test_killed_parent_leaves_no_zygote_or_job_behind(tmp_path):
    """SIGKILL the process that owns a pool while jobs run: the zygotes see their socket close,
    kill their jobs and exit, so nothing keeps running."""
    import sys

    script = tmp_path / "owner.py"
    script.write_text(
        "import os, sys, threading, time\n"
        f"sys.path.insert(0, {str(PROJECT)!r})\n"
        "from selfevolve.verifiers.sandbox import SandboxPool, CodeJob\n"
        "pool = SandboxPool(max_workers=2)\n"
        "pool.warm()\n"
        "print(pool._tmp_base, ' '.join(map(str, pool.helper_pids())), flush=True)\n"
        "jobs = [CodeJob(program='import time\\ntime.sleep(60)\\n', tests=['assert True'], timeout_s=60)] * 2\n"
        "threading.Thread(target=pool.run_batch, args=(jobs,), daemon=True).start()\n"
        "time.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        tmp_base, *pids = owner.stdout.readline().split()
        zygotes = [int(x) for x in pids]
        assert len(zygotes) == 2
        deadline = time.monotonic() + 20
        jobs: list[psutil.Process] = []
        while time.monotonic() < deadline and len(jobs) < 2:
            jobs = [c for z in zygotes for c in psutil.Process(z).children(recursive=True)]
            time.sleep(0.05)
        assert len(jobs) >= 2, "jobs did not start"
        owner.kill()
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        alive = zygotes + [j.pid for j in jobs]
        while time.monotonic() < deadline:
            alive = [pid for pid in alive if _running(pid)]
            if not alive:
                break
            time.sleep(0.1)
        assert not alive, [(pid, _cmd(psutil.Process(pid))) for pid in alive if psutil.pid_exists(pid)]
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if "tmp_base" in locals() and os.path.basename(tmp_base).startswith("selfevolve-sandbox-"):
            import shutil

            shutil.rmtree(tmp_base, ignore_errors=True)  # the killed owner could not remove it


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
