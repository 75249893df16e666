"""The data types of the sandbox: a job (``CodeJob``), its outcome (``SandboxResult`` with one
``TestResult`` per test) and the error raised when the sandbox itself cannot start. Re-exported
by ``selfevolve.verifiers.sandbox``, which documents how jobs run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from selfevolve.records import INFRA_STATUSES, IOCase  # noqa: F401 - re-exported

Status = Literal["passed", "failed", "timeout", "memory", "error", "infra_error"]


class SandboxError(RuntimeError):
    """The sandbox itself could not be started (no usable interpreter, zygote crashed at start)."""


class CodeJob(BaseModel):
    """One untrusted program and how to check it.

    ``program``: Python source (untrusted). ``tests``: Python statements run after the program and
    ``setup``, each one a test (usually ``assert f(x) == y``; a HumanEval ``check`` definition and
    ``check(f)`` are two tests). ``setup``: trusted statements run after the program and before the
    tests, in the tests' namespace (MBPP's ``test_setup_code``). ``io_cases``: stdin/stdout pairs;
    for each one the program runs afresh as ``__main__`` with that stdin and its stdout is compared
    (trailing whitespace per line and trailing blank lines ignored). ``timeout_s`` (seconds, wall
    and CPU) and ``memory_mb`` (address space, MiB) bound the whole job: the verdict on time is
    CPU time, so a busy machine does not fail a job; wall-clock time is only a backstop
    (``sandbox_zygote.wall_backstop_s``) for a program that waits instead of computing. ``strict_equality``:
    reject comparisons through user-defined dunders in tests (see ``selfevolve.verifiers.sandbox``).
    A job with neither tests nor io cases checks nothing: running it gives status ``error``.
    """

    model_config = ConfigDict(extra="forbid")

    program: str
    tests: list[str] = Field(default_factory=list)
    setup: str = ""
    io_cases: list[IOCase] = Field(default_factory=list)
    timeout_s: float = Field(5.0, gt=0, le=3600)
    memory_mb: int = Field(512, ge=32, le=1 << 20)
    strict_equality: bool = True


class TestResult(BaseModel):
    """Outcome of one test: ``kind`` is ``assert`` (an entry of ``CodeJob.tests``) or ``io``
    (an entry of ``CodeJob.io_cases``, ``index`` counted separately). ``error`` is a short reason
    when not passed; ``output`` the (capped) stdout of an io case."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid")

    index: int
    kind: Literal["assert", "io"] = "assert"
    source: str
    passed: bool
    error: str | None = None
    output: str | None = None


class SandboxResult(BaseModel):
    """Outcome of a job.

    ``status``: ``passed`` (program loaded, every test and io case passed), ``failed`` (some did
    not), ``timeout`` (wall or CPU limit), ``memory`` (a MemoryError under the address-space
    limit), ``error`` (the program or setup did not load: syntax error, exception at top level;
    or the process died without reporting; or the job has no tests and no io cases, so nothing
    could pass: the program is then not run), ``infra_error`` (the sandbox failed, not the program:
    its supervisor died on the job and on one retry; ``INFRA_STATUSES``). ``tests`` has one entry per assert test then per io
    case; when the harness did not finish, none of them is passed. ``duration_s`` is the wall
    time of the job in seconds; ``cpu_s`` its CPU time. ``isolation`` lists the features in force.
    """

    model_config = ConfigDict(extra="forbid")

    status: Status
    tests: list[TestResult] = Field(default_factory=list)
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    cpu_s: float = 0.0
    detail: str = ""
    isolation: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True only when the harness reported every test passed (``status == 'passed'``)."""
        return self.status == "passed"

    @property
    def n_passed(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def pass_fraction(self) -> float:
        """Passed tests / all tests (0.0 with no tests unless the job passed)."""
        if not self.tests:
            return 1.0 if self.passed else 0.0
        return self.n_passed / len(self.tests)
