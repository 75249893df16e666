"""Math verifier: final-answer extraction from untrusted model text and equivalence checking
with the ``math-verify`` library, under wall-clock limits that always hold.

Pipeline for one (gold, prediction) pair
----------------------------------------
1. ``extract_answer(prediction_text)`` picks the final answer out of free text (strategies: see
   its docstring, in a configurable order). Pure regex/string code; never raises. The grader tells it how many
   answers the gold lists, so that ``\\boxed{2} and \\boxed{5}`` is read as ``2, 5``.
2. ``normalize_answer`` pre-normalises both the gold answer and the extracted answer where
   ``math-verify`` needs help (Unicode signs, math delimiters, thousands separators, percent and
   degree signs, currency, units). A condition or quantifier is split off (``g(t)=0`` and
   ``t > 1`` in ``\\forall t>1, g(t)=0``). The maths itself is left to the library.
3. ``math_verify.parse`` parses each side (wrapped in ``\\boxed{}``) as one whole expression: an
   answer that does not parse as a whole is kept as text, compared as text, and never reduced to a
   number found inside it. ``math_verify.verify(gold, prediction)`` decides equivalence (exact and
   numeric equality, symbolic equality, sets, intervals, tuples, matrices, equations ``x = 5``),
   with its numeric test made exact for exact values (``math_compare.py``).

Policies (what counts as the same answer)
-----------------------------------------
* **Percentages**: a percent sign is a unit and is dropped: ``50%`` == ``50\\%`` == ``50 percent``
  == ``50``. ``0.5`` is *not* accepted for ``50%`` (benchmarks asking "what percent" expect 50).
* **Thousands separators**: ``1,000`` == ``1{,}000`` == ``1,\\!000`` == ``1\\,000`` == ``1 000`` ==
  ``1000`` when the whole answer is one number with well-formed 3-digit groups. ``1,2`` stays a
  list of two numbers.
* **Degrees**: a unit: ``55^\\circ`` == ``55°`` == ``55``. Radians are not converted (``\\pi/4`` !=
  ``45``).
* **Units**: a trailing ``\\text{...}``/``\\mbox{...}``/``\\mathrm{...}`` after a value is a unit and
  is removed (``10\\text{ cm}``, ``864 \\mbox{ inches}^2``); a plain-text unit after a number
  (``18 dollars``, ``5 cm``) is removed when it is a known unit or a word of >= 3 letters (so
  ``2 n`` stays the expression ``2n``; a one-letter unit needs a space: ``2t`` and ``5m`` are
  products). Nothing else is dropped: math-verify's own unit stripping, which turned ``n+2m``
  into ``n+2``, is off. ``\\mathrm{e}`` and ``\\mathrm{i}`` are the constants. Currency signs
  (``$``, ``\\$``) are removed.
* **Unicode signs**: minus signs and dashes (``−``, ``–`` ...) are ``-``; ``× ÷ · ≤ ≥ ≠ ± √ π ∞ ∈ ²
  ½`` ... are read as their LaTeX commands (``√12`` is ``\\sqrt{12}``).
* **Exact values and decimals**: ``\\dfrac``/``\\tfrac``/``\\frac`` and ``3/4`` are the same
  rational. Exact values (rationals, factorials, powers, radicals, constants) must be exactly
  equal: ``1/20!`` != ``1/21!`` (sympy; a 60-digit relative comparison where sympy cannot
  decide). A decimal must agree to 6 decimal places *and* to a relative 1e-5 (six significant
  digits): ``0.333333`` == ``1/3``, ``0.33`` != ``1/3``, ``0.0000001`` != ``0.0000002``.
* **Sets/tuples/intervals**: ``1,2,3`` (a bare list) is an unordered set; ``(1,2,3)`` is an ordered
  tuple; ``[2,5)`` is an interval and differs from ``(2,5)``; a dropped or added element is wrong.
  A bare gold list with repeats (``-2,-2`` for "find a and b") needs as many elements in the
  prediction.
* **Several final answers**: when the gold lists n answers, the last boxes that together hold n
  answers are the prediction's answer (``The roots are \\boxed{2} and \\boxed{5}``); math
  segments after "the final answer is" that only separators divide are one list
  (``The final answer is $8$, $4$``, OlympiadBench's format). Otherwise the last box counts.
* **Truncated answers**: a final answer that is cut off or unbalanced (an unclosed ``\\boxed{``,
  ``\\frac{1}{``, ``(1, 2``) is no answer (status ``no_answer``), even when an earlier number or
  box exists.
* **Conditions and quantifiers** (``\\forall``, ``\\exists``, "for all", "if", "where", "such
  that" ... outside brackets): the prediction must have the same conditions as the gold, each
  of the same kind and equivalent (same text, or equivalent relations: ``t > 1`` == ``1 < t``).
  A condition added or dropped is wrong.
* **Base-n numerals**: ``52_8`` is compared by digits and base (``52_{8}``, ``(52)_8`` and ``52``
  match; ``53_8`` and ``42`` do not), since math-verify would read the subscript as an index.
* **Unevaluated arithmetic**: when the gold is a number, an answer that is an arithmetic expression
  of numbers (``8086+2929``, ``(3+4)*2``, ``2^2+1``) is wrong even when its value matches (math-verify
  evaluates it): the question's computation restated is not its answer. A warm start with copy
  practice learned to answer ``Compute 8086 + 2929.`` with ``8086+2929``, and was graded right.
  Fractions (``3/4``, ``\\frac{10}{2}``) and scientific notation (``1.2 \\times 10^4``) are values.

Time limits
-----------
``math-verify`` times out with ``signal.alarm``, which only works in the main thread of the main
interpreter and whose handler only runs between bytecodes, so a long computation inside one C call
(big-integer arithmetic) overruns it; parsing has been reported to hang past its own timeout. A
process boundary is the only limit that always holds. So grading runs in worker *processes* with
the library's own timeouts disabled; the parent gives each item ``timeout_s`` seconds of wall
clock, kills a worker that overruns (the item gets status ``"timeout"``), starts a replacement and
re-queues the rest of that worker's chunk. A worker that dies (e.g. out of memory: each worker has
an address-space limit) reports ``"error"`` for the item it was on.

Workers are forked from a *zygote*: a clean interpreter (started with ``subprocess``, so the
caller's ``__main__`` is never re-imported and no multi-threaded parent is forked) that imports
math-verify and warms its ANTLR parser once, so a replacement worker is ready in milliseconds.
The pool is created lazily, reused across calls and shut down at interpreter exit (or by
``shutdown_pool()``); if the caller dies, the zygote and its workers die too.

Files
-----
``math.py`` (this module): the public API. ``math_extract.py``: extraction, and
``math_normalize.py``: normalisation (string code). ``math_compare.py``: parsing and equivalence,
run inside a worker. ``math_worker.py``: the zygote and worker processes. ``math_pool.py``: the parent-side pool.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Sequence

from selfevolve.verifiers.math_extract import _STRATEGY_FUNCS, DEFAULT_ORDER, STRATEGIES, extract_answer
from selfevolve.verifiers.math_normalize import normalize_answer
from selfevolve.verifiers.math_pool import _cpu_count  # noqa: F401 - benchmarks/bench_math_grading.py imports it here
from selfevolve.verifiers.math_pool import WorkerStartError, _get_pool, shutdown_pool

__all__ = [
    "DEFAULT_ORDER",
    "STRATEGIES",
    "MathGrade",
    "extract_answer",
    "normalize_answer",
    "grade_math",
    "grade_math_batch",
    "validate_math_answer",
    "validate_math_answers",
    "shutdown_pool",
    "WorkerStartError",
]

MathStatus = Literal["correct", "wrong", "no_answer", "timeout", "error"]


@dataclass(frozen=True)
class MathGrade:
    """Outcome of grading one prediction.

    ``status``: ``correct`` | ``wrong`` | ``no_answer`` (nothing extracted) | ``timeout`` (over the
    wall-clock limit; the worker was killed) | ``error`` (the gold answer does not parse, or the
    worker crashed). ``correct`` is ``status == "correct"``. ``extracted`` is the answer string
    found in the prediction (before normalisation; Unicode minus signs read as ``-``, several
    answers joined by ``", "``), ``detail`` a short human-readable reason.
    """

    correct: bool
    status: MathStatus
    extracted: str | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Public grading API
# --------------------------------------------------------------------------------------------


def _to_grade(res: tuple, extracted_hint: str | None = None) -> MathGrade:
    status, extracted, detail = res
    if status == "timeout" and extracted is None:
        extracted = extracted_hint
    return MathGrade(correct=status == "correct", status=status, extracted=extracted, detail=detail)


def grade_math_batch(
    items: Iterable[tuple[str, Any]],
    timeout_s: float = 5.0,
    workers: int = 0,
    order: Sequence[str] = DEFAULT_ORDER,
) -> list[MathGrade]:
    """Grade ``(gold_answer, prediction_text)`` pairs; returns one ``MathGrade`` per pair, in order.

    ``gold_answer`` is a reference final answer (``"18"``, ``"\\frac{1}{2}"``, ``"(3, \\pi/2)"``);
    ``prediction_text`` is untrusted model text (its answer is found with ``extract_answer`` using
    ``order``; when the gold lists n answers, the last boxes that hold n answers). Each pair gets ``timeout_s`` seconds of wall clock in a worker process; a pair that
    overruns gets status ``"timeout"`` (its worker is killed and replaced, other pairs are
    unaffected) and keeps, in ``extracted``, the final answer read from its prediction (extracted
    again on its own, under the same limit). ``workers``: number of worker processes, 0 = one per available core. Pairs are
    sent to workers in chunks. Raises ``ValueError`` for ``timeout_s <= 0`` or an unknown strategy
    name; never for bad prediction text.
    """
    if not timeout_s or timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    order = tuple(order)
    bad = [s for s in order if s not in _STRATEGY_FUNCS]
    if bad:
        raise ValueError(f"unknown extraction strategies {bad}; known: {list(STRATEGIES)}")
    pairs = list(items)
    tasks = []
    for gold, pred in pairs:
        if isinstance(pred, bytes):
            pred = pred.decode("utf-8", errors="replace")
        if pred is not None and not isinstance(pred, str):
            pred = str(pred)
        tasks.append(("grade", (str(gold) if gold is not None else "", pred, order)))
    pool = _get_pool(workers)
    results = pool.run(tasks, timeout_s)
    # an item that timed out keeps the answer it was graded on: extract it alone (string code, fast)
    lost = [i for i, r in enumerate(results) if r[0] == "timeout" and r[1] is None]
    hints = dict(zip(lost, pool.run([("extract", tasks[i][1]) for i in lost], timeout_s))) if lost else {}
    return [_to_grade(r, hints[i][1] if i in hints and hints[i][0] == "extracted" else None) for i, r in enumerate(results)]


def grade_math(gold: str, prediction_text: Any, timeout_s: float = 5.0, order: Sequence[str] = DEFAULT_ORDER) -> MathGrade:
    """Grade one prediction against a reference answer (see ``grade_math_batch``); runs in the
    shared worker pool, so the time limit holds in any thread."""
    return grade_math_batch([(gold, prediction_text)], timeout_s=timeout_s, order=order)[0]


def validate_math_answers(answers: Iterable[str], timeout_s: float = 5.0, workers: int = 0) -> list[tuple[bool, str]]:
    """``validate_math_answer`` for many answers at once (one pool round trip)."""
    tasks = [("validate", (a,)) for a in answers]
    if not tasks:
        return []
    out = []
    for status, _, detail in _get_pool(workers).run(tasks, timeout_s):
        if status == "ok":
            out.append((True, "ok"))
        elif status == "timeout":
            out.append((False, f"reference answer took longer than {timeout_s:g} s to parse"))
        else:
            out.append((False, detail))
    return out


def validate_math_answer(answer: str, timeout_s: float = 5.0) -> tuple[bool, str]:
    """Is ``answer`` usable as a reference answer (a Challenger's ``MathSpec.answer``)?

    Returns ``(True, "ok")`` when it is a non-empty, balanced string of at most 1,000 characters
    that math-verify parses *as a whole* into a mathematical object within ``timeout_s`` (an
    answer of which only a part parses, such as ``\\frac{1}{2}E_{1}``, is rejected) and that is not
    prose; otherwise ``(False, reason)``. Never raises for bad input.
    """
    return validate_math_answers([answer], timeout_s=timeout_s)[0]
