"""The child-process side of the math grading pool: the zygote (a clean interpreter that imports
math-verify, warms its parser and forks workers) and the worker loop that grades chunks of items
with ``selfevolve.verifiers.math_compare``. Started by ``selfevolve.verifiers.math_pool``; never
run in the caller's process.
"""

from __future__ import annotations

import logging
import os
import time

from selfevolve.verifiers.math_compare import _grade_pair, _parse_answer, _run_op
from selfevolve.verifiers.math_extract import DEFAULT_ORDER


# Typical answers, graded once in the zygote so that every forked worker starts with math-verify
# imported and latex2sympy's ANTLR prediction cache (DFA) warm; a cold DFA makes the first
# thousand parses of a fresh process several times slower.
_WARMUP_PAIRS: tuple[tuple[str, str], ...] = (
    ("18", "#### 18"), ("1000", "The answer is 1,000."), ("-3.5", "\\boxed{-7/2}"), ("25\\%", "\\boxed{25}"),
    ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}"), ("\\frac{3}{4}", "\\boxed{0.75}"), ("\\frac{14}{3}", "\\boxed{\\frac{14}{3}}"),
    ("\\sqrt{5}", "\\boxed{\\sqrt{5}}"), ("3\\sqrt{2}", "\\boxed{\\sqrt{18}}"), ("2\\sqrt{3}+1", "\\boxed{1+2\\sqrt3}"),
    ("\\pi", "\\boxed{\\pi}"), ("\\frac{\\pi}{4}", "\\boxed{\\pi/4}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3,\\frac{\\pi}{2})}"), ("(1,2,3)", "\\boxed{(1, 2, 3)}"),
    ("[2,5)", "\\boxed{[2,5)}"), ("(-\\infty, 0]", "\\boxed{(-\\infty,0]}"), ("\\{1,2\\}", "\\boxed{\\{2,1\\}}"),
    ("2,-1,-18", "$-18, 2, -1$"), ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\boxed{\\begin{pmatrix}0.2\\\\-3.6\\end{pmatrix}}"),
    ("x^2+2x+1", "\\boxed{(x+1)^2}"), ("x^5 - x^4 + x^3 - x^2 + x - 1", "\\boxed{x^5-x^4+x^3-x^2+x-1}"),
    ("(a+5)(b+2)", "\\boxed{ab+2a+5b+10}"), ("p - q", "\\boxed{p-q}"), ("2n", "$2 n$"), ("f(n) = 2n+1007", "$f(n)=2 n+1007$"),
    ("x=5", "\\boxed{5}"), ("55^\\circ", "\\boxed{55}"), ("10\\text{ cm}", "\\boxed{10}"), ("\\$18.90", "\\boxed{18.9}"),
    ("\\text{(E)}", "\\boxed{\\text{(E)}}"), ("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}"), ("52_8", "\\boxed{52_8}"),
    ("3R^2", "\\boxed{3R^2}"), ("\\frac{a b}{2}", "$\\frac{a b}{2}$"), ("2^{10}", "\\boxed{1024}"), ("10!", "\\boxed{3628800}"),
    ("\\log_{10} 2", "\\boxed{\\log_{10}2}"), ("e^{2}", "\\boxed{e^2}"), ("1-i", "\\boxed{1 - i}"), ("8+4i", "\\boxed{8+4i}"),
    ("\\binom{5}{2}", "\\boxed{10}"), ("\\dfrac{\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt3}{2}}"), ("-\\frac{1}{3}", "\\boxed{-1/3}"),
)


def _serve(conn) -> None:  # pragma: no cover - runs in a worker process
    """Worker loop on a duplex ``multiprocessing.connection.Connection``: send ``("ready",)``,
    then repeatedly receive a chunk ``[(idx, op, args), ...]`` and send ``(idx, (status,
    extracted, detail))`` per item. Returns on EOF or ``None``, and after a MemoryError (reported
    first) so the parent replaces a process that may be in a bad state."""
    try:
        conn.send(("ready",))
    except (OSError, EOFError):
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg is None:
            return
        for idx, op, args in msg:
            fatal = False
            try:
                res = _run_op(op, args)
            except MemoryError:
                res = ("error", None, "out of memory while grading")
                fatal = True
            except RecursionError:
                res = ("error", None, "recursion limit while grading")
            except BaseException as exc:  # noqa: BLE001 - untrusted input: report, keep serving
                res = ("error", None, f"{type(exc).__name__}: {str(exc)[:160]}")
            try:
                conn.send((idx, res))
            except (OSError, EOFError):
                return
            if fatal:
                return


def _prepare_process(memory_mb: int) -> None:  # pragma: no cover - runs in a child process
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        import resource

        if memory_mb > 0:
            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except Exception:
        pass


def _warm_up() -> None:  # pragma: no cover - runs in a child process
    for gold, pred in _WARMUP_PAIRS:
        try:
            _grade_pair(gold, pred, DEFAULT_ORDER)
        except Exception:
            pass
    _parse_answer.cache_clear()  # keep the DFA warm, not stale answers


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in a child process
    """Linux: SIGKILL this process when its parent (the zygote, single-threaded) dies."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _zygote_main(ctrl_fd: int, memory_mb: int) -> None:  # pragma: no cover - runs in the zygote
    """The zygote: a clean interpreter (started with ``subprocess``, own session) that imports
    math-verify, warms it while idle, and forks a worker per request. Protocol on the control socket:
    it sends ``b"R"`` when ready; each ``b"F"`` from the parent is answered with the worker's pid
    (8 bytes) and one end of a new socketpair (``SCM_RIGHTS``). On EOF it SIGKILLs its workers and
    exits; workers die with it (``PR_SET_PDEATHSIG``), so nothing outlives the pipeline even when a
    worker is stuck in C code."""
    import select
    import signal
    import socket
    import struct
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctrl = socket.socket(fileno=ctrl_fd)
    _prepare_process(0)
    try:
        _grade_pair("1", "\\boxed{\\frac{2}{2}}", DEFAULT_ORDER)  # import everything math-verify uses
    except Exception:
        pass
    # The rest of the warm-up runs a few pairs at a time while idle, so the first workers start
    # at once (warming their own parser on real items) and later forks inherit a warm parser.
    warm_todo = list(_WARMUP_PAIRS)
    children: set[int] = set()

    def reap() -> None:
        while children:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            children.discard(pid)

    try:
        ctrl.sendall(b"R")
        while True:
            ready, _, _ = select.select([ctrl], [], [], 0.02 if warm_todo else 0.5)
            reap()
            if not ready:
                for gold, pred in warm_todo[:4]:
                    try:
                        _grade_pair(gold, pred, DEFAULT_ORDER)
                    except Exception:
                        pass
                del warm_todo[:4]
                if not warm_todo:
                    _parse_answer.cache_clear()
                continue
            req = ctrl.recv(1)
            if req != b"F":
                break  # EOF (parent gone or pool closed) or garbage
            a, b = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    ctrl.close()
                    a.close()
                    _set_parent_death_signal()
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    _prepare_process(memory_mb)
                    _serve(Connection(b.detach()))
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            b.close()
            children.add(pid)
            socket.send_fds(ctrl, [struct.pack("q", pid)], [a.fileno()])
            a.close()
    except (OSError, EOFError):
        pass
    finally:
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        end = time.monotonic() + 3.0
        while children and time.monotonic() < end:  # reap them (SIGKILL is prompt), bounded
            reap()
            if children:
                time.sleep(0.01)
        os._exit(0)


def _worker_main(read_fd: int, write_fd: int, memory_mb: int) -> None:  # pragma: no cover - child process
    """Fallback worker (platforms without ``fork``/``send_fds``): a fresh interpreter per worker."""
    from multiprocessing.connection import Connection

    _prepare_process(memory_mb)
    _warm_up()
    rconn = Connection(read_fd, writable=False)
    wconn = Connection(write_fd, readable=False)

    class _Duplex:
        def send(self, obj):
            wconn.send(obj)

        def recv(self):
            return rconn.recv()

    _serve(_Duplex())
