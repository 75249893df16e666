"""The parent side of the math grading pool: worker processes with per-item wall-clock limits
that always hold (see "Time limits" in ``selfevolve.verifiers.math``). Workers are forked by a
zygote (``selfevolve.verifiers.math_worker``); an overrunning worker is killed and replaced.
"""

from __future__ import annotations

import atexit
import math as _pymath
import os
import threading
import time
from collections import deque
from multiprocessing.connection import wait as _mp_wait

# What the child processes run (imported here so that the dependency is visible; importing it
# does not import math-verify, only the child processes do).
from selfevolve.verifiers import math_worker


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except Exception:
        return max(1, os.cpu_count() or 1)


_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ZYGOTE_CODE = f"import sys; from {math_worker.__name__} import _zygote_main; _zygote_main(int(sys.argv[1]), int(sys.argv[2]))"
_WORKER_CODE = (f"import sys; from {math_worker.__name__} import _worker_main; "
                "_worker_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))")
_STARTUP_TIMEOUT_S = 120.0


class WorkerStartError(RuntimeError):
    """Grading worker processes could not be started (e.g. math-verify is not installed)."""


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _use_zygote() -> bool:
    import socket

    return hasattr(os, "fork") and hasattr(socket, "send_fds") and os.environ.get("SELFEVOLVE_MATH_ZYGOTE", "1") != "0"


class _Zygote:
    """Parent-side handle of the zygote process (see ``_zygote_main``)."""

    def __init__(self, memory_mb: int):
        import socket
        import subprocess
        import sys

        self.memory_mb = memory_mb
        parent_sock, child_sock = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE_CODE, str(child_sock.fileno()), str(int(memory_mb))],
                pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=_child_env(), close_fds=True, start_new_session=True,
            )
        finally:
            child_sock.close()
        self.sock = parent_sock
        self.sock.settimeout(_STARTUP_TIMEOUT_S)
        try:
            ok = self.sock.recv(1) == b"R"
        except OSError:
            ok = False
        if not ok:
            self.close()
            raise WorkerStartError(
                f"the math grading zygote did not start (exit code {self.proc.poll()}); run "
                f"`{sys.executable} -c 'import math_verify'` to see why"
            )
        self.sock.settimeout(30.0)

    def spawn(self) -> tuple[int, int]:
        """Fork a worker: (pid, socket fd of its connection). Raises OSError if the zygote is gone."""
        import socket
        import struct

        self.sock.sendall(b"F")
        msg, fds, _, _ = socket.recv_fds(self.sock, 8, 1)
        if len(msg) != 8 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("zygote closed the connection")
        return struct.unpack("q", msg)[0], fds[0]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()  # EOF: the zygote kills its workers and exits
        except Exception:
            pass
        try:
            self.proc.wait(timeout=3)
        except Exception:
            try:
                self.proc.kill()
                self.proc.wait(timeout=3)
            except Exception:
                pass


class _Worker:
    """One grading process: forked by the zygote (``pid`` + duplex socket connection), or, as a
    fallback, a fresh interpreter started with ``subprocess`` talking over two pipes. Either way
    the caller's ``__main__`` is never re-imported (no ``if __name__ == "__main__"`` needed) and
    no possibly multi-threaded parent is forked; workers' stdout is /dev/null, so they can never
    corrupt a command's JSON output."""

    __slots__ = ("pid", "proc", "rconn", "wconn", "inflight", "t0", "ready", "started")

    def __init__(self, memory_mb: int, zygote: _Zygote | None):
        from multiprocessing.connection import Connection

        self.inflight: deque = deque()
        self.t0 = 0.0
        self.ready = False
        self.started = time.monotonic()
        self.proc = None
        if zygote is not None:
            self.pid, fd = zygote.spawn()
            self.rconn = self.wconn = Connection(fd)
            return
        import subprocess
        import sys

        c_read, p_write = os.pipe()  # parent -> child
        p_read, c_write = os.pipe()  # child -> parent
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(c_read), str(c_write), str(int(memory_mb))],
                pass_fds=(c_read, c_write), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=_child_env(), close_fds=True,
            )
        finally:
            os.close(c_read)
            os.close(c_write)
        self.pid = self.proc.pid
        self.rconn = Connection(p_read, writable=False)
        self.wconn = Connection(p_write, readable=False)

    def kill(self) -> None:
        import signal

        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=5)
            except Exception:
                pass
        else:
            try:
                os.kill(self.pid, signal.SIGKILL)  # the zygote reaps it
            except OSError:
                pass
        for c in {id(self.rconn): self.rconn, id(self.wconn): self.wconn}.values():
            try:
                c.close()
            except Exception:
                pass

    def stop(self) -> None:
        try:
            self.wconn.send(None)
        except Exception:
            pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1)
            except Exception:
                pass
        self.kill()


class _MathPool:
    """Worker processes with per-item wall-clock limits enforced by the parent.

    ``run(tasks, timeout_s)`` takes ``[(op, args), ...]`` and returns ``(status, extracted,
    detail)`` tuples in order. Chunks of items go to idle workers; each item has ``timeout_s``
    seconds from when its worker started it (the previous result of that worker, or the send).
    An overrunning worker is killed and replaced (a fork of the warm zygote: milliseconds); its
    item gets ``"timeout"`` and the rest of its chunk is re-queued. Raises ``WorkerStartError``
    if workers cannot be started.
    """

    def __init__(self, workers: int, memory_mb: int = 2048):
        self.size = workers
        self.memory_mb = memory_mb
        self._workers: list[_Worker] = []
        self._zygote: _Zygote | None = None
        self._lock = threading.Lock()
        self.restarts = 0
        self._start_failures = 0

    def _new_worker(self) -> _Worker:
        if not _use_zygote():
            return _Worker(self.memory_mb, None)
        for attempt in range(2):
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.close()
                self._zygote = _Zygote(self.memory_mb)
            try:
                return _Worker(self.memory_mb, self._zygote)
            except OSError:
                self._zygote.close()
                self._zygote = None
        raise WorkerStartError("the math grading zygote stopped answering")

    def _ensure(self) -> None:
        while len(self._workers) > self.size:
            self._workers.pop().stop()
        while len(self._workers) < self.size:
            self._workers.append(self._new_worker())

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                w.stop()
            self._workers = []
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self.restarts += 1
        i = self._workers.index(w)
        self._workers[i] = self._new_worker()

    def _start_failed(self, w: _Worker, why: str) -> None:
        self._start_failures += 1
        if self._start_failures >= 3 * max(1, self.size):
            w.kill()
            self._workers.remove(w)
            raise WorkerStartError(f"math grading workers fail to start ({why})")
        self._replace(w)

    def run(self, tasks: list[tuple[str, tuple]], timeout_s: float, chunk_size: int | None = None) -> list[tuple]:
        n = len(tasks)
        if n == 0:
            return []
        with self._lock:
            self._ensure()
            nw = len(self._workers)
            if chunk_size is None:
                chunk_size = max(1, min(32, _pymath.ceil(n / (nw * 4))))
            items = [(i, op, args) for i, (op, args) in enumerate(tasks)]
            queue: deque[list] = deque(items[i : i + chunk_size] for i in range(0, n, chunk_size))
            results: list[tuple | None] = [None] * n
            remaining = n

            def finish(idx: int, res: tuple) -> None:
                nonlocal remaining
                if results[idx] is None:
                    results[idx] = res
                    remaining -= 1

            def requeue(w: _Worker) -> None:
                if w.inflight:
                    queue.appendleft(list(w.inflight))
                w.inflight = deque()

            while remaining > 0:
                # hand out chunks to idle, ready workers
                for w in list(self._workers):
                    if w.ready and not w.inflight and queue:
                        chunk = queue.popleft()
                        try:
                            w.wconn.send(chunk)
                        except (OSError, EOFError, ValueError):
                            queue.appendleft(chunk)
                            self._replace(w)
                            continue
                        w.inflight = deque(chunk)
                        w.t0 = time.monotonic()
                watched = [w for w in self._workers if w.inflight or not w.ready]
                now = time.monotonic()
                deadlines = [w.t0 + timeout_s for w in watched if w.inflight]
                deadlines += [w.started + _STARTUP_TIMEOUT_S for w in watched if not w.ready]
                wait_s = max(0.0, min(deadlines) - now) if deadlines else 0.05
                ready = _mp_wait([w.rconn for w in watched], timeout=wait_s)
                by_conn = {id(w.rconn): w for w in watched}
                for conn in ready:
                    w = by_conn[id(conn)]
                    try:
                        while conn.poll():
                            msg = conn.recv()
                            if not w.ready:
                                w.ready = msg == ("ready",)
                                if w.ready:
                                    self._start_failures = 0
                                continue
                            idx, res = msg
                            while w.inflight and w.inflight[0][0] != idx:
                                w.inflight.popleft()  # pragma: no cover - defensive
                            if w.inflight:
                                w.inflight.popleft()
                            finish(idx, tuple(res))
                            w.t0 = time.monotonic()
                            if not w.inflight:
                                break
                    except (EOFError, OSError):
                        # the worker died (out of memory, crash): blame the item it was on
                        if not w.ready:
                            self._start_failed(w, "exited during start-up")
                            continue
                        if w.inflight:
                            idx = w.inflight.popleft()[0]
                            finish(idx, ("error", None, "grading worker died (crash or out of memory)"))
                        requeue(w)
                        self._replace(w)
                now = time.monotonic()
                for w in list(self._workers):
                    if w.inflight and now - w.t0 > timeout_s:
                        idx = w.inflight.popleft()[0]
                        finish(idx, ("timeout", None, f"grading took longer than {timeout_s:g} s; worker killed"))
                        requeue(w)
                        self._replace(w)
                    elif not w.ready and now - w.started > _STARTUP_TIMEOUT_S:
                        self._start_failed(w, f"not ready after {_STARTUP_TIMEOUT_S:g} s")
            return [r if r is not None else ("error", None, "not graded") for r in results]


_POOL: _MathPool | None = None
_POOL_LOCK = threading.Lock()


def _get_pool(workers: int) -> _MathPool:
    global _POOL
    size = workers if workers > 0 else _cpu_count()
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _MathPool(size)
        else:
            with _POOL._lock:
                _POOL.size = size  # workers are added or stopped on the next run; the zygote stays
        return _POOL


def shutdown_pool() -> None:
    """Stop the grading worker processes (they are restarted on the next call). Registered atexit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.close()
            _POOL = None


atexit.register(shutdown_pool)
