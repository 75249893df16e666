"""One result shape for every evaluation: ``selfevolve evaluate`` (the model answers, here) and
``selfevolve grade`` (someone else's predictions file) both turn per-question rows into metrics with
:func:`summarise`, so the same benchmark reads the same in both, in DVC and in MLflow.

A row is a dict with ``correct`` (0/1 per sample; empty for a question nobody answered, counted
wrong) and optionally ``categories`` (``Question.categories()``), ``status`` (a verdict status per
sample), and the generation fields ``answered``, ``finish_reasons``, ``forced``, ``output_tokens``
(one per sample) that only rows the pipeline generated have.

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
Code", eq. 1) per question, averaged over questions (``selfevolve.stats.pass_at_k``).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean
from typing import Any, Iterable, Sequence

from selfevolve.config import VerifierParams
from selfevolve.records import INFRA_STATUSES, MathSpec, Question, RecordFileError, iter_json_lines
from selfevolve.stats import pass_at_k
from selfevolve.verifiers.grading import verify_answers
from selfevolve.verifiers.programs import code_program

__all__ = ["DEFAULT_KS", "Prediction", "PredictionsFileError", "grade_predictions", "metric_name", "read_predictions", "summarise"]

#: pass@k values reported when at least k samples exist for every graded question.
DEFAULT_KS = (1, 5, 10, 20, 50, 100)


def metric_name(text: Any) -> str:
    """A metric-name-safe token: lowercased, runs of characters other than letters, digits,
    ``_``, ``-`` and ``.`` replaced by ``_`` (MLflow accepts these; ``@`` and spaces are not wanted)."""
    return re.sub(r"[^a-z0-9_.\-]+", "_", str(text).lower()).strip("_") or "none"


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


def _as_prediction(obj: Any, path: Any, line: int) -> Prediction:
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
    return [_as_prediction(obj, path, lineno) for lineno, obj in iter_json_lines(path, PredictionsFileError)]




def natural_key(s: str) -> tuple:
    """Sort key that orders embedded numbers numerically (``level_2`` before ``level_10``)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


# ------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------
def _fraction(row: dict) -> float:
    return fmean(row["correct"]) if row["correct"] else 0.0


def summarise(rows: Sequence[dict], ks: int | Iterable[int] = 1) -> dict[str, float | int]:
    """Flat metrics of per-question rows (module docstring), every value a number (DVC and MLflow
    take them as they are).

    Returns ``n`` (questions), ``samples``, ``accuracy`` (mean over questions of the fraction of
    correct samples, a question without samples counting 0; with equal sample counts, the mean over
    samples), ``pass_at_<k>`` for each k in ``ks``, ``infra_errors`` (samples the verifier could not
    grade, counted as not correct), ``answered_rate``, ``truncated_rate``, ``forced_rate`` and
    ``mean_output_tokens`` when the rows carry the generation fields, and
    ``accuracy_<category>_<value>`` per category value (``accuracy_level_3``, ``accuracy_form_4_3``,
    ``accuracy_subject_algebra``). Values rounded to 6 decimals (3 for token counts). With no rows:
    ``n`` 0 and every rate 0.0. Raises ``ValueError`` if a row with samples has fewer than a k."""
    ks = sorted({ks} if isinstance(ks, int) else set(ks))
    if not rows:
        return {"n": 0, "samples": 0, "accuracy": 0.0, **{f"pass_at_{k}": 0.0 for k in ks}}
    for r in rows:
        if r["correct"] and len(r["correct"]) < max(ks, default=0):
            raise ValueError(f"question {r.get('id')!r} has {len(r['correct'])} samples, pass@{max(ks)} needs at least {max(ks)}")
    out: dict[str, float | int] = {"n": len(rows), "samples": sum(len(r["correct"]) for r in rows),
                                   "accuracy": round(fmean(_fraction(r) for r in rows), 6)}
    for k in ks:
        out[f"pass_at_{k}"] = round(fmean(pass_at_k(len(r["correct"]), int(sum(r["correct"])), k) if r["correct"] else 0.0
                                          for r in rows), 6)
    out["infra_errors"] = sum(s in INFRA_STATUSES for r in rows for s in r.get("status", []))
    if all("answered" in r for r in rows) and out["samples"]:
        out["answered_rate"] = round(fmean(a for r in rows for a in r["answered"]), 6)
        out["truncated_rate"] = round(fmean(f == "length" for r in rows for f in r["finish_reasons"]), 6)
        out["forced_rate"] = round(fmean(f for r in rows for f in r.get("forced", [0] * len(r["answered"]))), 6)
        out["mean_output_tokens"] = round(fmean(t for r in rows for t in r["output_tokens"]), 3)
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        for key, val in (r.get("categories") or {}).items():
            groups[(key, val)].append(_fraction(r))
    for (key, val), fractions in sorted(groups.items(), key=lambda kv: (kv[0][0], natural_key(kv[0][1]))):
        out[f"accuracy_{metric_name(key)}_{metric_name(val)}"] = round(fmean(fractions), 6)
    return out


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
    """Grade predictions against questions with the external verifiers (``verify_answers``).
    Returns ``(metrics, failures)``.

    ``predictions``: a path to a JSONL file (``read_predictions``) or an iterable of
    ``Prediction``/dicts with ``id``/``task_id`` and ``completion``; several rows with one id are
    samples of that question. A math completion is graded as a whole (the grader extracts the final
    answer); a code completion becomes a program by ``programs.code_program``.

    ``metrics``: :func:`summarise` over one row per question (a question without predictions counts
    as wrong; pass@k for k in ``ks``, default ``DEFAULT_KS``, only where every graded question has
    at least k samples, plus 1 and that smallest sample count when ``ks`` is not given; a domain
    breakdown ``accuracy_domain_<d>`` when the questions mix domains), plus ``graded`` (questions
    with >= 1 sample), ``missing``, ``unknown_ids`` (rows whose id is no question, e.g. grading a
    ``--limit``-ed benchmark; otherwise ignored) and ``status`` (counts over samples:
    ``correct``/``wrong``/``no_answer``/``timeout``/``error`` for math,
    ``passed``/``failed``/``timeout``/``memory``/``error`` for code).

    ``failures``: one dict per incorrect sample: ``id``, ``sample`` (0-based among that id's
    samples), ``status``, ``detail``, ``gold`` and ``extracted`` (math), ``completion``
    (truncated to ``completion_chars``).

    Raises ``PredictionsFileError`` for a malformed predictions file, ``ValueError`` for k < 1.
    """
    if isinstance(predictions, (str, os.PathLike)):
        preds = read_predictions(predictions)
    else:
        preds = [p if isinstance(p, Prediction) else _as_prediction(p, "<predictions>", i + 1) for i, p in enumerate(predictions)]
    if ks and any(k < 1 for k in ks):
        raise ValueError(f"k must be >= 1, got {tuple(ks)}")

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
    per_q: dict[str, dict[str, list]] = defaultdict(lambda: {"correct": [], "status": []})
    for (qid, j, comp), q, v in zip(flat, qs, verdicts):
        status_counts[v.status] += 1
        per_q[qid]["correct"].append(int(v.correct >= 1.0))
        per_q[qid]["status"].append(v.status)
        if v.correct >= 1.0:
            continue
        fail = {"id": qid, "sample": j, "status": v.status, "detail": v.detail}
        if isinstance(q.spec, MathSpec):
            fail["gold"] = q.spec.answer
            fail["extracted"] = v.extracted
        fail["completion"] = comp[:completion_chars]
        failures.append(fail)

    mixed = len({q.domain for q in benchmark_questions}) > 1
    rows = [{"id": q.id, "correct": per_q[q.id]["correct"] if q.id in per_q else [], "status": per_q[q.id]["status"] if q.id in per_q else [],
             "categories": {**({"domain": q.domain} if mixed else {}), **q.categories()}} for q in benchmark_questions]
    min_n = min((len(r["correct"]) for r in rows if r["correct"]), default=0)
    usable = {k for k in (ks or DEFAULT_KS) if k <= min_n} | ({1, min_n} if min_n >= 1 and not ks else set())
    metrics: dict[str, Any] = summarise(rows, usable)
    metrics.update({"graded": len(per_q), "missing": len(rows) - len(per_q), "unknown_ids": unknown,
                    "status": dict(sorted(status_counts.items()))})
    return metrics, failures
