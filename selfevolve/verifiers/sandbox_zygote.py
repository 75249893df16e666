"""The parent side of one sandbox zygote: start the child program (``sandbox_child.py``) in a fresh
interpreter with a scrubbed environment, send it one job at a time, enforce the job's wall-clock
deadline, and turn the harness's nonce-framed reports and the exit status into a
``SandboxResult``. ``selfevolve.verifiers.sandbox`` keeps a pool of these.
"""

from __future__ import annotations

import marshal
import math
import os
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

from selfevolve.verifiers import sandbox_framing
from selfevolve.verifiers.sandbox_framing import _FRAME, _recv_msg, _send_msg
from selfevolve.verifiers.sandbox_models import CodeJob, SandboxError, SandboxResult, Status, TestResult

TAIL_BYTES = 4096          # stdout_tail / stderr_tail
IO_OUTPUT_CAP = 1 << 20    # per io case stdout returned to the parent
FSIZE_BYTES = 16 << 20     # RLIMIT_FSIZE: largest file (and captured stream) a job may write
WALL_GRACE_S = 0.25        # added to the wall-clock backstop
#: The verdict on time is CPU time (``timeout_s`` of it; RLIMIT_CPU kills at ceil(timeout_s)), which
#: a busy machine does not change. Wall-clock time only backstops programs that wait instead of
#: computing (sleep, a blocked read): ``WALL_BACKSTOP_FACTOR * timeout_s + 1 s``, so a job that
#: gets a third of a core still finishes.
WALL_BACKSTOP_FACTOR = 3.0


def wall_backstop_s(timeout_s: float) -> float:
    """Seconds of wall clock after which a job of ``timeout_s`` seconds (CPU) is killed."""
    return WALL_BACKSTOP_FACTOR * timeout_s + 1.0 + WALL_GRACE_S


# --------------------------------------------------------------------------------------------
# the harness's reports (framed messages on the socket: sandbox_framing)
# --------------------------------------------------------------------------------------------

def _parse_frames(data: bytes, nonce: bytes) -> list:
    """Decode every ``nonce|len|marshal`` frame in ``data``; anything else is ignored."""
    out = []
    pos = 0
    while True:
        i = data.find(nonce, pos)
        if i < 0:
            break
        j = i + len(nonce)
        if j + _FRAME.size > len(data):
            break
        (n,) = _FRAME.unpack_from(data, j)
        body = data[j + _FRAME.size: j + _FRAME.size + n]
        if len(body) == n:
            try:
                out.append(marshal.loads(body))
            except (EOFError, ValueError, TypeError):
                pass
            pos = j + _FRAME.size + n
        else:
            pos = j
    return out


# --------------------------------------------------------------------------------------------
# the child program (sandbox_child.py: zygote + harness, stdlib only), passed as text
# --------------------------------------------------------------------------------------------

_BOOTSTRAP = (
    "import sys,builtins;"
    "exec(compile(sys.argv[1],'<selfevolve-sandbox>','exec'),"
    "{'__builtins__':dict(builtins.__dict__),'__name__':'__selfevolve_sandbox__'})"
)

def _harness_source() -> str:
    """sandbox_child.py with sandbox_framing.py inserted at its marker line."""
    marker = "\n#@sandbox_framing.py@\n"
    child = (Path(__file__).resolve().parent / "sandbox_child.py").read_text(encoding="utf-8")
    if child.count(marker) != 1:
        raise SandboxError(f"sandbox_child.py must hold the line {marker!r} exactly once")
    return child.replace(marker, "\n" + Path(sandbox_framing.__file__).read_text(encoding="utf-8") + "\n")


_HARNESS_SOURCE = _harness_source()


# --------------------------------------------------------------------------------------------
# one zygote, and the decoding of its jobs' reports
# --------------------------------------------------------------------------------------------

def _scrubbed_env() -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
            "HOME": "/nonexistent"}



class _Zygote:
    """One supervisor interpreter; serves one job at a time."""

    def __init__(self, python: str, features: Sequence[str], idle_timeout_s: float, tmp_base: str,
                 audit: bool = True, probed: Sequence[str] | None = None):
        self.audit = audit
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [python, "-S", "-s", "-B", "-c", _BOOTSTRAP, _HARNESS_SOURCE, str(child.fileno())],
                env=_scrubbed_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self._stderr, pass_fds=(child.fileno(),), close_fds=True,
                start_new_session=True, cwd="/",
            )
        except OSError as exc:
            self.sock.close()
            raise SandboxError(f"cannot start the sandbox interpreter {python!r}: {exc}") from exc
        finally:
            child.close()
        cfg = {"features": list(features), "idle_timeout_s": float(idle_timeout_s),
               "home": os.path.realpath(os.path.expanduser("~")), "tmp": tmp_base, "probed": probed}
        try:
            _send_msg(self.sock, cfg)
            self.sock.settimeout(60)
            hello, _ = _recv_msg(self.sock)
            self.sock.settimeout(None)
        except OSError:
            hello = None
        if not hello or hello.get("op") != "hello":
            err = self._stderr_text()
            self.kill()
            raise SandboxError(f"the sandbox zygote failed to start: {err[-2000:] or 'no output'}")
        self.features: list[str] = list(hello["features"])
        self.pid: int = hello["pid"]
        self.euid: int = hello["euid"]
        self.last_used = time.monotonic()

    def _stderr_text(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            self._stderr.close()
        except OSError:
            pass

    def close(self) -> None:
        try:
            _send_msg(self.sock, {"op": "exit"})
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def run(self, job: CodeJob, tmp_base: str) -> SandboxResult:
        """Run one job (see ``run_tests``). Raises ``_ZygoteDied`` when the supervisor is gone."""
        t0 = time.monotonic()
        nonce = secrets.token_bytes(16)
        cpu_s = max(1, math.ceil(job.timeout_s))
        workdir = None
        if "mount" not in self.features:
            workdir = tempfile.mkdtemp(prefix="job-", dir=tmp_base)
        payload = marshal.dumps({
            "nonce": nonce, "program": job.program, "tests": list(job.tests), "setup": job.setup,
            "io": [c.stdin.encode("utf-8") for c in job.io_cases], "strict": bool(job.strict_equality),
            "cpu_s": cpu_s, "memory_mb": int(job.memory_mb), "fsize": FSIZE_BYTES, "workdir": workdir,
            "io_cap": IO_OUTPUT_CAP, "audit": self.audit,
        })
        res_r, res_w = os.pipe()
        out_fd = _memfd("stdout")
        err_fd = _memfd("stderr")
        data = bytearray()
        timed_out = False
        exit_msg = None
        try:
            try:
                _send_msg(self.sock, {"op": "run", "payload": payload},
                          fds=(res_w, out_fd, err_fd))
                os.close(res_w)
                res_w = -1
                started, _ = _recv_msg(self.sock)
            except OSError as exc:
                raise _ZygoteDied(str(exc)) from exc
            if not started or started.get("op") != "started":
                raise _ZygoteDied("no start acknowledgement")
            deadline = t0 + wall_backstop_s(job.timeout_s)
            eof = False
            sock_fd = self.sock.fileno()
            poller = select.poll()  # not select.select: a big pipeline process may hold fds >= 1024
            poller.register(res_r, select.POLLIN)
            poller.register(sock_fd, select.POLLIN)
            while not (eof and exit_msg is not None):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                ready = {fd for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1))}
                if res_r in ready:
                    chunk = os.read(res_r, 1 << 16)
                    if chunk:
                        if len(data) < (64 << 20):
                            data += chunk
                    else:
                        eof = True
                        poller.unregister(res_r)
                if sock_fd in ready:
                    exit_msg, _ = _recv_msg(self.sock)
                    if exit_msg is None:
                        raise _ZygoteDied("zygote closed the connection")
                    poller.unregister(sock_fd)
            if timed_out and exit_msg is None:
                try:
                    _send_msg(self.sock, {"op": "kill"})
                    self.sock.settimeout(10)
                    exit_msg, _ = _recv_msg(self.sock)
                    self.sock.settimeout(None)
                except OSError as exc:
                    raise _ZygoteDied(f"no exit status after kill: {exc}") from exc
                if exit_msg is None:
                    raise _ZygoteDied("zygote closed the connection after kill")
            if timed_out:
                # drain what the job wrote before it died
                os.set_blocking(res_r, False)
                while True:
                    try:
                        chunk = os.read(res_r, 1 << 16)
                    except BlockingIOError:
                        break
                    if not chunk:
                        break
                    data += chunk
            duration = time.monotonic() - t0
            stdout_tail = _tail(out_fd)
            stderr_tail = _tail(err_fd)
        finally:
            for fd in (res_r, res_w, out_fd, err_fd):
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            if workdir:
                _rmtree(workdir)
            self.last_used = time.monotonic()
        return _interpret(job, bytes(data), nonce, exit_msg or {}, timed_out, cpu_s, duration,
                          stdout_tail, stderr_tail, self.features)


class _ZygoteDied(RuntimeError):
    pass


def _memfd(name: str) -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name)
    fd, path = tempfile.mkstemp(prefix="selfevolve-sbx-")
    os.unlink(path)
    return fd


def _tail(fd: int, n: int = TAIL_BYTES) -> str:
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        start = max(0, size - n)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, n)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _rmtree(path: str) -> None:
    def onerror(func, p, exc):
        try:
            os.chmod(p, 0o700)
            parent = os.path.dirname(p)
            os.chmod(parent, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


def _normalise_output(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _short(s: str, n: int = 300) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _interpret(job: CodeJob, data: bytes, nonce: bytes, exit_msg: dict, timed_out: bool, cpu_limit: int,
               duration: float, stdout_tail: str, stderr_tail: str, features: list[str]) -> SandboxResult:
    """Turn the harness's frames and the exit status into a SandboxResult (parent side)."""
    frames = [f for f in _parse_frames(data, nonce) if isinstance(f, tuple) and f]
    final = next((f for f in reversed(frames) if f[0] == "F"), None)
    setup_err = next((f for f in frames if f[0] == "E" and len(f) == 2), None)
    progress = [f for f in frames if f[0] == "S" and len(f) == 3]
    cpu = float(exit_msg.get("cpu", 0.0))
    code = exit_msg.get("code")
    isolation = ["rlimits", "audit", "scrubbed-env", "private-dir", *features]
    base = dict(stdout_tail=stdout_tail, stderr_tail=stderr_tail, duration_s=round(duration, 4),
                cpu_s=round(cpu, 4), isolation=isolation)
    a_src = [_short(src, 2000) for src in job.tests]
    io_src = [f"stdin: {_short(c.stdin, 200)!r}" for c in job.io_cases]

    valid = (final is not None and len(final) == 5 and isinstance(final[2], list) and isinstance(final[4], list)
             and len(final[4]) == len(job.io_cases)
             and (len(final[2]) == len(job.tests)))
    if valid:
        _, load_error, rows, memory_hit, io_rows = final
        tests: list[TestResult] = []
        for i, (src, row) in enumerate(zip(a_src, rows)):
            ok, err, _ = row
            tests.append(TestResult(index=i, kind="assert", source=src, passed=ok is True,
                                    error=None if ok is True else (err or "failed")))
        for i, (src, row, case) in enumerate(zip(io_src, io_rows, job.io_cases)):
            ok, err, out = row
            text = (out or b"").decode("utf-8", "replace")
            if ok is True and _normalise_output(text) != _normalise_output(case.stdout):
                ok, err = False, f"wrong output: expected {_short(case.stdout, 120)!r}, got {_short(text, 120)!r}"
            tests.append(TestResult(index=i, kind="io", source=src, passed=ok is True,
                                    error=None if ok is True else (err or "failed"), output=_short(text, 4096)))
        if cpu > job.timeout_s:  # finished, but over its CPU time (RLIMIT_CPU counts whole seconds)
            reason = f"timeout: CPU limit of {job.timeout_s:g} s exceeded ({cpu:.2f} s)"
            return SandboxResult(status="timeout", tests=[t.model_copy(update={"passed": False, "error": t.error or reason})
                                                          for t in tests], detail=reason, **base)
        if load_error is None and all(t.passed for t in tests):
            return SandboxResult(status="passed", tests=tests, **base)
        if memory_hit:
            status: Status = "memory"
            detail = load_error or "MemoryError"
        elif load_error is not None:
            status, detail = "error", load_error
        else:
            status = "failed"
            first = next(t for t in tests if not t.passed)
            detail = f"{sum(t.passed for t in tests)}/{len(tests)} tests passed; first failure: {first.error}"
        return SandboxResult(status=status, tests=tests, detail=_short(detail, 600), **base)

    # no valid final report: the harness did not finish, nothing counts as passed
    hung = progress[-1][1:] if progress else None

    def not_run(reason: str) -> list[TestResult]:
        out = []
        for kind, srcs in (("assert", a_src), ("io", io_src)):
            for i, src in enumerate(srcs):
                if hung is None or hung == (kind, i) or (hung[0] == "load" and kind == "assert"):
                    err = reason
                else:
                    err = f"not run ({reason})"
                out.append(TestResult(index=i, kind=kind, source=src, passed=False, error=err))
        return out

    if setup_err is not None:
        reason = _short(str(setup_err[1]), 600)
        return SandboxResult(status="error", tests=not_run(reason), detail=reason, **base)
    killed_by = -code if isinstance(code, int) and code < 0 else (code - 128 if isinstance(code, int) and code > 128 else None)
    # SIGXCPU, or a SIGKILL we did not send after real CPU use: the kernel's RLIMIT_CPU hard limit
    cpu_exceeded = killed_by == 24 or (killed_by == 9 and not exit_msg.get("killed") and cpu >= cpu_limit * 0.5)
    if timed_out or cpu_exceeded:
        reason = (f"timeout: CPU limit of {job.timeout_s:g} s exceeded" if cpu_exceeded and not timed_out else
                  f"timeout: wall-clock backstop of {wall_backstop_s(job.timeout_s):g} s exceeded ({cpu:.2f} s CPU)")
        return SandboxResult(status="timeout", tests=not_run(reason), detail=reason, **base)
    if killed_by is not None:
        how = f"killed by signal {killed_by}"
    else:
        how = f"exited with status {code} before reporting"
    if final is not None:
        how += " (malformed report)"
    reason = f"the process ended before the harness reported: {how}"
    status = "memory" if "MemoryError" in stderr_tail else "error"
    return SandboxResult(status=status, tests=not_run(reason), detail=reason, **base)
