"""Sandbox for untrusted Python: a program plus ``assert`` tests, or stdin/stdout cases.

Every program a model writes is untrusted. It runs here, never in the pipeline's process.

How a job runs
--------------
A *zygote* is a fresh interpreter (``python -S -s -B``: no site-packages, no user site, no .pyc
writes) started with a scrubbed environment (``PATH``, ``LANG``, ``PYTHONHASHSEED=0`` and nothing
else from the parent), ``cwd=/``, in its own session. It preloads common stdlib modules, probes
which kernel features work (below) and then forks one child per job, so a job starts from a
pristine copy of a clean interpreter in about a millisecond instead of ~15 ms for a new
interpreter. The zygote itself never runs untrusted code. ``run_tests_batch`` keeps one zygote per
worker; each job is a separate fork:

    pipeline ──socket──▶ zygote: own network namespace, read-only mount tree (set up once)
                           └─ fork ─▶ job: setsid, new mount + IPC namespace, fresh tmpfs /tmp,
                                      rlimits, unprivileged uid, audit hook, then program + tests
                                      (with a pid namespace, the job forks once more to be its pid 1)

Isolation properties and how each is enforced (``SandboxResult.isolation`` lists what was active)
--------------------------------------------------------------------------------------------------
* separate process, clean interpreter: always (zygote fork, scrubbed environment, ``sys.argv``,
  ``sys.path`` without the working directory, ``__main__`` replaced; ``random`` reseeded per job).
* time: the verdict is CPU time: ``RLIMIT_CPU`` = ceil(timeout_s) (the kernel SIGKILLs at the hard
  limit) and a job that finishes over ``timeout_s`` of CPU is a timeout, so load on the machine
  never fails an honest job. A wall-clock backstop enforced by the parent
  (``sandbox_zygote.wall_backstop_s``: 3 x ``timeout_s`` + 1.25 s; the whole process group is
  SIGKILLed, and with a pid namespace everything in it dies with its pid 1) ends programs that
  wait instead of computing. A batch runs at most one job per core. Always.
* memory: ``RLIMIT_AS`` = ``memory_mb`` (includes the ~30 MB of the interpreter itself). Always.
* processes and threads: ``RLIMIT_NPROC`` = 1, so ``fork``/``clone`` (threads too) fail with EAGAIN.
  The kernel ignores RLIMIT_NPROC for uid 0, so when the pipeline runs as root the job runs under
  a random unprivileged uid (feature ``uid``: ``setresuid`` to an id in [2e9, 2e9+2^20), or 65534
  when the uid map is narrower). Fork/exec/spawn/``subprocess``/``os.system`` are also refused by
  the audit hook (always).
* files: ``RLIMIT_FSIZE`` (16 MiB, also caps captured stdout/stderr), ``RLIMIT_NOFILE`` = 64,
  ``RLIMIT_CORE`` = 0. With feature ``mount`` (root, or a user namespace): a private mount namespace
  in which every mount is read-only and nosuid (``mount_setattr`` recursive), ``/tmp`` is a fresh
  64 MiB tmpfs holding the working directory ``/tmp/work`` (it vanishes with the job), and ``/root``
  and the caller's ``$HOME`` are hidden behind empty tmpfs mounts (the Python installation is
  bind-mounted back when it lives there). Without ``mount``: a private ``mkdtemp`` directory removed
  afterwards, plus the audit hook refusing writes, deletes, renames, chmods outside it.
* network: feature ``net``: the zygote's new, empty network namespace (only a loopback that is down),
  shared by its jobs, which run one after another. Always, in addition: the audit hook refuses socket
  creation, connect, bind, DNS lookups, syslog.
* other processes: with feature ``uid`` (a fresh uid per job) the job cannot signal any other process,
  cannot fork, and ``/proc`` is a private instance mounted ``hidepid=2`` (kernel >= 5.8) that shows
  only its own process. Feature ``pid`` (used when jobs cannot get a uid of their own, e.g. in a user
  namespace): a new pid namespace with its own ``/proc``; the parent's pid reads 0 and everything
  left in the namespace dies with the job. Always: ``os.kill``/``os.killpg``/``pthread_kill`` are
  refused by the audit hook and ``PR_SET_PDEATHSIG`` kills the job when its supervisor dies; a
  zygote whose pipeline dies (its socket closes) kills its running job and exits. Feature ``ipc``:
  new SysV IPC namespace. ``PR_SET_NO_NEW_PRIVS`` is set, so setuid binaries grant nothing.
* secrets: the environment is rebuilt from scratch (nothing from the pipeline's environment);
  ``/proc/<other pid>/environ`` is out of reach (pid namespace / other uid / audit hook).
* output: stdout/stderr go to memfds capped by RLIMIT_FSIZE; ``stdout_tail``/``stderr_tail``
  return the last 4 KiB; per-case stdout for io cases is returned up to 1 MiB.

Which features are available is probed at run time (once per pool), most to least isolated:
as root: ``uid``, ``mount``, ``net``, ``ipc`` (namespaces via ``unshare(2)``; ``pid`` only when the uid
range is too narrow for a uid per job or the kernel predates per-mount ``hidepid``); as another user:
the same namespaces inside a new *user* namespace when the kernel allows unprivileged user
namespaces (feature ``userns``; then all capabilities are dropped before untrusted code runs), and
otherwise none of them. Without namespaces the job still has the rlimits, the scrubbed environment,
the private directory and the audit-hook policy (``audit``), which PEP 578 says is *not* a security
boundary: a program that loads native code could bypass it. ``SELFEVOLVE_SANDBOX_FEATURES`` (a
comma list, or ``none``) restricts the set; ``sandbox_capabilities()`` reports it.

Per-test results that a program cannot fake
-------------------------------------------
The harness writes results to a pipe, framed as ``nonce(16 random bytes) | length | marshal``; the
nonce is created by the parent for each job and never written anywhere the program can read. The
parent accepts a test as passed only from the harness's *final* frame, written after every test
has run; progress frames only locate a hang. Exit status never counts. Covered tricks:
``sys.exit(0)``/``exit()``/``os._exit(0)``/killing the harness early (no final frame → not passed),
printing a fake marker (stdout is not the channel), writing to fds 3..N or closing them (frames
without the nonce are ignored; a corrupted stream yields no final frame), raising ``SystemExit``
or ``KeyboardInterrupt`` inside a test (counts as a failure: the harness catches ``BaseException``),
monkeypatching ``AssertionError`` (``assert`` uses the interpreter's own), monkeypatching builtins
or stdlib module functions (tests run with a private pristine copy of the builtins; builtins and the
modules the tests name are restored before each test and checked after it; a change during a test
fails it), replacing harness helpers (the harness holds its own references, has its own builtins
and is unreachable: ``sys._getframe``, ``tb_frame``/``gi_frame``/``cr_frame``, ``sys.settrace``,
``sys.setprofile``, ``gc.get_objects``/``get_referrers``/``get_referents``, ``ctypes`` and new
subinterpreters are refused by the audit hook; ``/proc/*/mem`` cannot be opened).

The ``__eq__`` trick (``strict_equality``, on by default): ``assert f(x) == y`` passes when ``f``
returns an object whose ``__eq__`` always answers True, and no generic assert can be written as
``type(x) is`` checks. So the harness rewrites the *tests* (not the program): every operand of a
comparison (``==``, ``<``, ``in`` ...; not ``is``), of arithmetic and unary operators, every assert
and ``if``/``while`` condition and every argument of ``abs``/``round``/``min``/``max``/``sum``/
``sorted``/``divmod``/``pow``/``bool`` is checked first. A value passes the check when its type and
(recursively, up to 10^6 items) the items of lists/tuples/dicts/sets are builtin or stdlib types, or
classes that define none of the comparison, truth, container or arithmetic dunders themselves. An
object of a class that overrides one (``__eq__``, ``__bool__``, ``__sub__`` ...) fails the test with
``StrictEqualityError``. Not covered: user classes with legitimate ``__eq__`` compared by tests
(set ``strict_equality=False`` for such questions), test helpers in ``setup`` that the program
redefines, values laundered through functions other than those listed (``str(x)`` etc., which
need the right answer anyway), and an adversary that runs code at precise moments inside a test
expression (finalizers, signal handlers) to patch and unpatch a module between two checks.

Not covered at all: kernel exploits (this is not a boundary against them; namespaces widen the
kernel surface), side channels, CPU/memory pressure on the host within the limits, reading
world-readable files outside the hidden directories, and resource use by the tmpfs (64 MiB).
Without the ``mount``/``uid`` features a program can read everything the pipeline's user can read.

Files
-----
``sandbox.py`` (this module): the public API and the pool. ``sandbox_models.py``: ``CodeJob``,
``SandboxResult``, ``TestResult``, ``SandboxError``. ``sandbox_zygote.py``: the parent side of one
zygote (start, deadlines, decoding the harness's reports). ``sandbox_child.py``: the program that
runs in the child interpreter (zygote and harness: namespaces, mounts, limits, audit hook).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Sequence

from selfevolve.verifiers.sandbox_models import INFRA_STATUSES, CodeJob, SandboxError, SandboxResult, Status, TestResult  # noqa: F401
from selfevolve.verifiers.sandbox_zygote import _parse_frames  # noqa: F401 - re-exported (tests decode frames)
from selfevolve.verifiers.sandbox_zygote import _short, _Zygote, _ZygoteDied

__all__ = [
    "CodeJob",
    "TestResult",
    "SandboxResult",
    "SandboxError",
    "SandboxPool",
    "run_tests",
    "run_tests_batch",
    "sandbox_capabilities",
    "shutdown_default_pool",
    "default_pool",
    "ALL_FEATURES",
    "INFRA_STATUSES",
]

#: kernel-level features the probe may enable (``audit`` and rlimits are always on)
ALL_FEATURES = ("uid", "userns", "mount", "net", "pid", "ipc")

_log = logging.getLogger(__name__)

#: ``SandboxResult.detail`` of a job without tests or io cases (status ``error``; nothing is run)
NO_TESTS_DETAIL = "the job has no tests and no io cases: nothing to check, so it cannot pass"


def _features_from_env() -> list[str]:
    raw = os.environ.get("SELFEVOLVE_SANDBOX_FEATURES")
    if raw is None:
        return list(ALL_FEATURES)
    raw = raw.strip().lower()
    if raw in ("", "none", "0", "off"):
        return []
    out = [f.strip() for f in raw.split(",") if f.strip()]
    unknown = sorted(set(out) - set(ALL_FEATURES))
    if unknown:
        raise ValueError(f"SELFEVOLVE_SANDBOX_FEATURES: unknown feature(s) {unknown}; known: {list(ALL_FEATURES)}")
    return out


class SandboxPool:
    """A pool of sandbox zygotes (one per concurrent job).

    ``max_workers``: most zygotes kept (default: CPU count). ``features``: kernel features allowed
    (subset of ``ALL_FEATURES``; default from ``SELFEVOLVE_SANDBOX_FEATURES`` or all; what works
    is probed). ``python``: interpreter for jobs (default ``sys.executable``, which must be the same
    version as this process). ``audit=False`` leaves out the in-process audit-hook policy so that
    tests can check what the kernel layer alone contains; never use it for real work.
    Thread-safe; close with ``close()`` (also at interpreter exit). Raises ``SandboxError`` when no
    zygote can be started.
    """

    def __init__(self, max_workers: int | None = None, features: Iterable[str] | None = None,
                 python: str | None = None, idle_timeout_s: float = 300.0, audit: bool = True):
        self.audit = bool(audit)
        self.max_workers = max(1, max_workers or _cpu_count())
        self.features = list(_features_from_env() if features is None else features)
        unknown = sorted(set(self.features) - set(ALL_FEATURES))
        if unknown:
            raise ValueError(f"unknown sandbox feature(s) {unknown}; known: {list(ALL_FEATURES)}")
        self.python = python or sys.executable
        self.idle_timeout_s = idle_timeout_s
        self._idle: list[_Zygote] = []
        self._all: set[_Zygote] = set()
        self._lock = threading.Lock()
        if not sys.platform.startswith("linux"):
            raise SandboxError(f"the sandbox needs Linux (memfd, prctl, namespaces); this is {sys.platform}")
        self._owner_pid = os.getpid()
        self._closed = False
        self._probed: list[str] | None = None
        self._tmp_base = tempfile.mkdtemp(prefix="selfevolve-sandbox-")
        os.chmod(self._tmp_base, 0o711)  # job uids must traverse it to reach their own directory
        atexit.register(_close_pool_at_exit, weakref.ref(self))

    # -- zygote management
    def _spawn(self) -> _Zygote:
        z = _Zygote(self.python, self.features, self.idle_timeout_s, self._tmp_base, self.audit, self._probed)
        with self._lock:
            self._all.add(z)
            first = self._probed is None
            if first:
                self._probed = list(z.features)
        if first and self.features:
            missing = [f for f in ("mount", "net") if f in self.features and f not in z.features]
            own_uid = "uid" in z.features or ("userns" in z.features and "pid" in z.features)
            if missing or not own_uid:
                _log.warning("sandbox: kernel isolation unavailable here (active: %s; missing: %s); untrusted code "
                             "is contained by rlimits and the audit-hook policy only, which is not a security "
                             "boundary. See selfevolve.verifiers.sandbox.", z.features or "none",
                             missing + ([] if own_uid else ["uid or userns+pid"]))
        return z

    def _checkout(self) -> _Zygote:
        if os.getpid() != self._owner_pid:
            raise SandboxError("a SandboxPool cannot be used from a forked child process; create a new one")
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        while True:
            with self._lock:
                z = self._idle.pop() if self._idle else None
            if z is None:
                return self._spawn()
            if z.alive() and time.monotonic() - z.last_used < self.idle_timeout_s - 5:
                return z
            self._discard(z)

    def _checkin(self, z: _Zygote) -> None:
        with self._lock:
            if not self._closed and z.alive() and len(self._idle) < self.max_workers:
                self._idle.append(z)
                return
        self._discard(z)

    def _discard(self, z: _Zygote) -> None:
        with self._lock:
            self._all.discard(z)
        z.kill()

    def warm(self, n: int | None = None) -> None:
        """Start ``n`` zygotes now (default ``max_workers``), in parallel."""
        n = min(self.max_workers, n or self.max_workers)
        with self._lock:
            missing = n - len(self._all)
        if missing <= 0:
            return
        with ThreadPoolExecutor(missing) as ex:
            zs = list(ex.map(lambda _: self._spawn(), range(missing)))
        for z in zs:
            self._checkin(z)

    # -- public
    def run(self, job: CodeJob) -> SandboxResult:
        """Run one job; see ``run_tests``. A supervisor that dies on the job is replaced and the job
        run once more; a second death gives status ``infra_error`` (not the program's fault)."""
        if not job.tests and not job.io_cases:
            return SandboxResult(status="error", detail=NO_TESTS_DETAIL)
        for attempt in range(2):
            z = self._checkout()
            try:
                res = z.run(job, self._tmp_base)
            except _ZygoteDied as exc:
                self._discard(z)
                if attempt == 1:
                    return SandboxResult(status="infra_error", detail=f"sandbox supervisor died twice: {exc}",
                                         tests=[TestResult(index=i, source=_short(s, 2000), passed=False,
                                                           error="sandbox supervisor died")
                                                for i, s in enumerate(job.tests)])
                continue
            except BaseException:
                self._discard(z)
                raise
            self._checkin(z)
            return res
        raise AssertionError("unreachable")

    def run_batch(self, jobs: Sequence[CodeJob], workers: int = 0) -> list[SandboxResult]:
        """Run ``jobs`` on up to ``workers`` zygotes (0 = pool size), never more than the cores this
        process may use (more would only make the jobs wait on each other); results in input order."""
        jobs = list(jobs)
        if not jobs:
            return []
        n = min(len(jobs), workers or self.max_workers, _cpu_count())
        if n <= 1:
            return [self.run(j) for j in jobs]
        self.warm(n)
        with ThreadPoolExecutor(n, thread_name_prefix="sandbox") as ex:
            return list(ex.map(self.run, jobs))

    def capabilities(self) -> dict:
        """``{"features": [...], "euid": int, "python": str}`` as probed by a zygote."""
        z = self._checkout()
        try:
            return {"features": list(z.features), "euid": z.euid, "python": self.python,
                    "isolation": ["rlimits", "audit", "scrubbed-env", "private-dir", *z.features]}
        finally:
            self._checkin(z)

    def helper_pids(self) -> list[int]:
        """Pids of the zygote processes this pool keeps (children of this process between jobs)."""
        with self._lock:
            return [z.proc.pid for z in self._all if z.alive()]

    def close(self) -> None:
        """Stop every zygote and remove the pool's temporary directory. Idempotent."""
        if os.getpid() != self._owner_pid:
            return
        with self._lock:
            self._closed = True
            zs = list(self._all)
            self._all.clear()
            self._idle.clear()
        for z in zs:
            z.close()
        shutil.rmtree(self._tmp_base, ignore_errors=True)

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_pool_at_exit(ref: "weakref.ReferenceType[SandboxPool]") -> None:
    pool = ref()
    if pool is not None:
        pool.close()


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_DEFAULT: SandboxPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> SandboxPool:
    """The process-wide pool used by ``run_tests``/``run_tests_batch`` (created on first use)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed or _DEFAULT._owner_pid != os.getpid():
            _DEFAULT = SandboxPool()
        return _DEFAULT


def shutdown_default_pool() -> None:
    """Stop the default pool's zygotes (a later call starts new ones)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is not None:
            _DEFAULT.close()
            _DEFAULT = None


def run_tests(job: CodeJob, pool: SandboxPool | None = None) -> SandboxResult:
    """Run one untrusted program and its tests in the sandbox.

    ``job``: a ``CodeJob`` (program, assert tests and/or io cases, ``timeout_s`` seconds,
    ``memory_mb`` MiB). Returns a ``SandboxResult`` (never raises for anything the program does);
    raises ``SandboxError`` if the sandbox cannot start at all. A job with neither tests nor io
    cases is not run: it gets status ``error`` (``NO_TESTS_DETAIL``), never ``passed``. Typical
    overhead: ~3-5 ms per job on a warm pool, plus the program's own run time.
    """
    return (pool or default_pool()).run(job)


def run_tests_batch(jobs: Sequence[CodeJob], workers: int = 0, pool: SandboxPool | None = None) -> list[SandboxResult]:
    """Run many jobs on a pool of ``workers`` sandbox supervisors (0 = one per core; at most one per core).

    Returns one ``SandboxResult`` per job, in input order. Raises ``SandboxError`` only when the
    sandbox cannot start.
    """
    return (pool or default_pool()).run_batch(jobs, workers)


def sandbox_capabilities(pool: SandboxPool | None = None) -> dict:
    """Which isolation features this machine gives the sandbox (probed at run time).

    Returns ``{"features": [...], "euid": int, "python": str, "isolation": [...]}``; features are
    a subset of ``ALL_FEATURES``.
    """
    return (pool or default_pool()).capabilities()
