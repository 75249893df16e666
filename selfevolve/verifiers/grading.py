"""Grading: answers against questions, by the external verifiers only (never by a model).

``verify_answers(questions, answers, verifiers)`` is the one dispatch every part of the pipeline
uses (the ``verify`` stage, evaluation, checkpoint validation, MASS fitness, benchmarks): a math
answer is graded against ``spec.answer`` by the math grader (answer extraction + math-verify in
worker processes with hard time limits, ``selfevolve.verifiers.math``); a code answer is a program
run in the sandbox against ``spec.tests`` / ``spec.io_cases`` (``selfevolve.verifiers.sandbox``).
``verify_fn(verifiers)`` wraps it as the ``VerifyFn`` MASS takes.

Predictions files (``selfevolve grade``) are read and graded in ``selfevolve.evaluation.metrics``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from selfevolve.config import VerifierParams
from selfevolve.records import CodeSpec, MathSpec, Question, Verdict

__all__ = [
    "VerifyFn",
    "verify_answers",
    "verify_fn",
]

VerifyFn = Callable[[list[Question], list["str | None"]], list["float | None"]]
"""``verify_fn(questions, answers) -> scores``: one score in [0, 1] per question (1 = correct), or
``None`` where the question has no checkable verifier spec."""


# ------------------------------------------------------------------------------------------
# the dispatch
# ------------------------------------------------------------------------------------------


def _sandbox_detail(r: Any) -> str:
    """A short reason from a ``SandboxResult``: the first failed test's error, else the result's
    detail or the tail of stderr."""
    for t in r.tests:
        if not t.passed and t.error:
            return t.error[:300]
    for text in (r.detail, r.stderr_tail):
        if text:
            return text[-300:]
    return ""


def verify_answers(questions: Sequence[Question], answers: Sequence[str | None], verifiers: VerifierParams,
                   ids: Sequence[str] | None = None) -> list[Verdict]:
    """Verify one answer per question with the external verifiers.

    Math: the answer text is graded against ``spec.answer`` by ``grade_math_batch`` (the final answer
    is extracted from the text). Code: the answer is the program, run in the sandbox against the
    spec's tests and io cases. A missing or empty answer is wrong with status ``no_answer``. A code
    job the sandbox could not run (its supervisor died twice) has status ``infra_error``: not
    ``graded``, so no reward and no accuracy counts it.
    Limits come from ``verifiers`` (``math_timeout_s``, ``code_timeout_s``, ``code_memory_mb``,
    ``workers``). Returns one ``Verdict`` per input, in order (``attempt_id`` from ``ids``, else
    the question id). Raises ``ValueError`` when the lengths differ.
    """
    if len(questions) != len(answers) or (ids is not None and len(ids) != len(questions)):
        raise ValueError(f"verify_answers: {len(questions)} questions, {len(answers)} answers"
                         + (f", {len(ids)} ids" if ids is not None else ""))
    ids = list(ids) if ids is not None else [q.id for q in questions]
    out: list[Verdict | None] = [None] * len(questions)
    math_idx, code_idx = [], []
    for i, (q, a) in enumerate(zip(questions, answers)):
        if not a:
            out[i] = Verdict(attempt_id=ids[i], question_id=q.id, correct=0.0, status="no_answer", detail="no answer in the completion")
        elif isinstance(q.spec, MathSpec):
            math_idx.append(i)
        else:
            code_idx.append(i)
    if math_idx:
        from selfevolve.verifiers.math import grade_math_batch

        grades = grade_math_batch([(questions[i].spec.answer, answers[i]) for i in math_idx],  # type: ignore[union-attr]
                                  timeout_s=verifiers.math_timeout_s, workers=verifiers.workers)
        for i, g in zip(math_idx, grades):
            out[i] = Verdict(attempt_id=ids[i], question_id=questions[i].id, correct=float(g.correct), status=g.status,
                             detail=g.detail[:300], extracted=g.extracted)
    if code_idx:
        from selfevolve.verifiers.sandbox import CodeJob, run_tests_batch

        jobs = []
        for i in code_idx:
            spec: CodeSpec = questions[i].spec  # type: ignore[assignment]
            jobs.append(CodeJob(program=answers[i], tests=spec.tests, setup=spec.setup, io_cases=spec.io_cases,
                                timeout_s=verifiers.code_timeout_s, memory_mb=verifiers.code_memory_mb))
        for i, r in zip(code_idx, run_tests_batch(jobs, workers=verifiers.workers)):
            out[i] = Verdict(attempt_id=ids[i], question_id=questions[i].id, correct=float(r.passed), status=r.status,
                             detail=_sandbox_detail(r))
    return out  # type: ignore[return-value]


def checkable(question: Question) -> bool:
    """Whether a verifier can decide answers to ``question``: a math spec with a non-empty answer,
    or a code spec with at least one test or io case."""
    spec = question.spec
    if isinstance(spec, MathSpec):
        return bool(spec.answer.strip())
    return bool(spec.tests or spec.io_cases)


def verify_fn(verifiers: VerifierParams) -> VerifyFn:
    """:func:`verify_answers` as a ``VerifyFn`` (the form MASS's fitness takes): 1.0 / 0.0 per
    answer, ``None`` for questions without a checkable spec (MASS judges those pairwise) and where
    the verifier itself failed (``Verdict.graded`` false: never a 0)."""

    def verify(questions: list[Question], answers: list[str | None]) -> list[float | None]:
        idx = [i for i, q in enumerate(questions) if checkable(q)]
        out: list[float | None] = [None] * len(questions)
        if idx:
            for i, v in zip(idx, verify_answers([questions[i] for i in idx], [answers[i] for i in idx], verifiers)):
                out[i] = float(v.correct) if v.graded else None
        return out

    return verify
