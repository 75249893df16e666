"""Equivalence of a gold answer and a prediction, as run inside a grading worker process (no time
limit here: ``selfevolve.verifiers.math_pool`` kills a worker that overruns), and the
reference-answer check behind ``validate_math_answer``.

Parsing and comparison are math-verify's. This module adds what the library does not do (the
policies are listed in ``selfevolve.verifiers.math``):

* whole-answer parsing: an answer is parsed as one LaTeX expression, with math-verify's unit
  stripping off (units are removed by ``normalize_answer``) and without its search for a number
  or fraction somewhere inside the text: ``\\frac{1}{2}E_{1}`` is not read as ``1/2``, ``2t`` not
  as ``2``; an answer that does not parse as a whole is compared as text;
* exact numbers: math-verify's numeric test (``sympy_numeric_eq``: ``(a - b).evalf(chop=True) ==
  0``, or both rounded to 6 decimal places) treats a tiny difference as zero, an absolute
  tolerance: ``1/20!`` equals ``1/21!``, ``0.0000001`` equals ``0.0000002``. Installed into math-verify in the worker, ``_exact_numeric_eq``
  keeps the library's test and then requires exact equality of exact values (sympy; 60-digit
  evaluation, relative, when sympy cannot decide) and, when a decimal is involved, a *relative*
  difference of at most ``DECIMAL_REL_TOL``;
* conditions and quantifiers (``split_conditions``), base-n numerals, repeated list elements,
  unevaluated arithmetic for a numeral gold (``_unevaluated``).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any, Sequence

from selfevolve.verifiers.math_extract import _looks_bare, extract_final_answer, unbalanced
from selfevolve.verifiers.math_normalize import normalize_answer, split_conditions, split_top_level

#: largest relative difference accepted when a decimal is compared with another value: six
#: significant digits, rounded or cut (0.333333 == 1/3; 0.0000001 != 0.0000002)
DECIMAL_REL_TOL = 1e-5


def _has_sympy(parsed: Sequence[Any]) -> bool:
    return any(not isinstance(x, str) for x in parsed)


def _cache_size() -> int:
    try:
        return max(0, int(os.environ.get("SELFEVOLVE_MATH_PARSE_CACHE", "4096")))
    except ValueError:
        return 4096


@lru_cache(maxsize=1)
def _parse_config() -> list:
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
    from math_verify.parser import LatexExtractionConfig

    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all",
                               equations=False)
    return [LatexExtractionConfig(try_extract_without_anchor=False, normalization_config=norm)]


@lru_cache(maxsize=_cache_size())
def _parse_answer(norm: str) -> tuple:
    """Parse a normalised answer string with math-verify as one whole expression: a tuple of the
    sympy object and the library's string form, or only the string when it does not parse as a
    whole; empty when nothing is found. No time limit. Cached per worker (gold answers and common
    predictions repeat across samples); the cache size is ``$SELFEVOLVE_MATH_PARSE_CACHE``
    entries (default 4096, 0 disables it)."""
    from math_verify import parse

    if not norm:
        return ()
    return tuple(parse("\\boxed{" + norm + "}", extraction_config=_parse_config(), parsing_timeout=None))


# --------------------------------------------------------------------------------------------
# exact numbers (installed into math-verify's comparison)
# --------------------------------------------------------------------------------------------


def _relatively_equal(a: Any, b: Any, tol: float, digits: int) -> bool:
    av, bv = a.evalf(digits), b.evalf(digits)
    scale = max(abs(av), abs(bv))
    diff = abs(av - bv)
    return bool(diff == 0) if scale == 0 else bool(diff <= tol * scale)


def _close(a: Any, b: Any) -> bool:
    """After math-verify's numeric test accepted ``a`` and ``b``: are they really equal?"""
    from math_verify.grader import safe_sympy_doit
    from sympy import Float, MatrixBase, MatrixExpr, simplify

    if isinstance(a, (MatrixBase, MatrixExpr)) or isinstance(b, (MatrixBase, MatrixExpr)):
        return True  # compared element by element, through this same test
    try:
        a, b = safe_sympy_doit(a), safe_sympy_doit(b)
        if a == b:
            return True
        inexact = a.has(Float) or b.has(Float)
        if not (a.is_number and b.is_number):
            return inexact or simplify(a - b) == 0
        if inexact:
            return _relatively_equal(a, b, DECIMAL_REL_TOL, 30)
        zero = (a - b).is_zero
        if zero is not None:
            return bool(zero)
        return _relatively_equal(a, b, 1e-40, 60)
    except Exception:  # noqa: BLE001 - anything sympy raises: not shown equal
        return False


def _install_exact_numeric_eq() -> None:
    """Make math-verify's numeric test exact for exact values and relative for decimals (see the
    module docstring). Idempotent; called in the worker before the first comparison."""
    import math_verify.grader as grader

    if getattr(grader.sympy_numeric_eq, "selfevolve_exact", False):
        return
    library_test = grader.sympy_numeric_eq

    def _exact_numeric_eq(a, b, float_rounding, numeric_precision):
        return library_test(a, b, float_rounding, numeric_precision) and _close(a, b)

    _exact_numeric_eq.selfevolve_exact = True  # type: ignore[attr-defined]
    grader.sympy_numeric_eq = _exact_numeric_eq


# --------------------------------------------------------------------------------------------
# policies math-verify does not have
# --------------------------------------------------------------------------------------------

_BASE_N_RE = re.compile(r"^\(?([0-9A-Za-z]+)\)?_\{?(\d+)\}?$")
_DIGITS_RE = re.compile(r"^([0-9A-Za-z]+)$")
_NUMBER = r"[-+]?\d+(?:\.\d+)?"
_NUMERAL_RE = re.compile(rf"^{_NUMBER}$")
_OPERATOR = r"(?:[-+*/^]|\\times|\\cdot|\\div)"
_ARITHMETIC_RE = re.compile(rf"^[\s(]*{_NUMBER}(?:[\s)]*{_OPERATOR}[\s(]*{_NUMBER})+[\s)]*$")
_VALUE_RE = re.compile(rf"^{_NUMBER}\s*(?:(?:\\times|\\cdot|\*)\s*10\s*\^\s*\{{?-?\d+\}}?|/\s*\d+)$")


def _unevaluated(gold_main: str, pred_main: str) -> str | None:
    """Why a prediction is not the value a numeral gold asks for: an arithmetic expression of
    numbers (``8086+2929``, ``(3+4)*2``, ``2^2+1``) restates a computation instead of doing it, and
    math-verify would evaluate it and accept it. A fraction (``3/4``) and scientific notation
    (``1.2 \\times 10^4``) are values. None when the gold is not a numeral or the prediction is no such expression."""
    if not _NUMERAL_RE.match(gold_main.strip()) or not _ARITHMETIC_RE.match(pred_main) or _VALUE_RE.match(pred_main.strip()):
        return None
    return f"{pred_main[:80]!r} is an unevaluated expression, not the value {gold_main[:80]!r}"


_TEXT_WRAP_RE = re.compile(r"\\(?:text|mbox|textrm|textnormal|mathrm|textit|textbf)\s*\{([^{}]*)\}")
_SPACING_RE = re.compile(r"\\(?:left|right)(?![A-Za-z])|\\[,;:!\s]|~|\\q?quad(?![A-Za-z])|\s+")
_RELATION_SPELLINGS = (("\\geqslant", "\\ge"), ("\\leqslant", "\\le"), ("\\geq", "\\ge"), ("\\leq", "\\le"),
                       ("\\neq", "\\ne"))


def _multiset_mismatch(gold_norm: str, pred_norm: str) -> str | None:
    """math-verify compares a bare list ``a, b`` as a set, so ``-2,-2`` (``a = b = -2``) would
    equal ``-2``. When the gold list repeats an element, the prediction must list as many."""
    g = split_top_level(gold_norm)
    if len(g) < 2 or len(set(g)) == len(g):
        return None
    p = split_top_level(pred_norm)
    if len(p) != len(g):
        return f"expected {len(g)} answers (with repeats), got {len(p)}"
    return None


def _canon_condition(c: str) -> str:
    c = _SPACING_RE.sub("", _TEXT_WRAP_RE.sub(r"\1", c))
    for a, b in _RELATION_SPELLINGS:
        c = c.replace(a, b)
    return c.lower()


def _same_condition(a: str, b: str) -> bool:
    from math_verify import verify

    if _canon_condition(a) == _canon_condition(b):
        return True
    pa, pb = _parse_answer(a), _parse_answer(b)
    return _has_sympy(pa) and _has_sympy(pb) and verify(list(pa), list(pb), timeout_seconds=None)


def _condition_mismatch(gold: list[tuple[str, str]], pred: list[tuple[str, str]]) -> str | None:
    """A condition or quantifier must be matched by the same kind of condition, equivalent (same
    text, or equivalent relations such as ``t > 1`` and ``1 < t``); none may be added or dropped."""
    if not gold and not pred:
        return None
    if not pred:
        return f"the reference answer has the condition {gold[0][1][:60]!r}; the prediction has none"
    if not gold:
        return f"the prediction adds the condition {pred[0][1][:60]!r}, which the reference answer does not have"
    left = list(pred)
    for kind, cond in gold:
        hit = next((p for p in left if p[0] == kind and _same_condition(cond, p[1])), None)
        if hit is None:
            return f"condition {cond[:60]!r} of the reference answer is not matched"
        left.remove(hit)
    if left:
        return f"the prediction adds the condition {left[0][1][:60]!r}"
    return None


# --------------------------------------------------------------------------------------------
# the operations a worker runs
# --------------------------------------------------------------------------------------------


def _grade_pair(gold: str, prediction: Any, order: tuple[str, ...]) -> tuple[str, str | None, str]:
    """(status, extracted, detail) for one pair, in-process and without a time limit."""
    from math_verify import verify

    _install_exact_numeric_eq()
    gold_main, gold_conds = split_conditions(normalize_answer(gold if isinstance(gold, str) else str(gold)))
    arity = len(split_top_level(gold_main)) if gold_main else 1
    extracted = extract_final_answer(prediction, order, arity)
    if extracted is None:
        return "no_answer", None, "no final answer found in the prediction"
    gold_parsed = _parse_answer(gold_main)
    if not gold_parsed:
        return "error", extracted, f"reference answer {str(gold)[:80]!r} does not parse"
    pred_main, pred_conds = split_conditions(normalize_answer(extracted))
    base = _BASE_N_RE.match(gold_main)
    if base:
        # "52_8" is a numeral in base 8: math-verify reads the subscript as an index symbol and
        # would accept any other numeral in the same base, so compare digits and base exactly.
        pm = _BASE_N_RE.match(pred_main) or _DIGITS_RE.match(pred_main)
        same = bool(pm) and pm.group(1).upper() == base.group(1).upper() and (
            pm.lastindex is None or pm.lastindex < 2 or pm.group(2) == base.group(2))
        if not same:
            return "wrong", extracted, f"{pred_main[:80]!r} != {gold_main[:80]!r} (base-{base.group(2)} numeral)"
    else:
        pred_parsed = _parse_answer(pred_main)
        if not pred_parsed:
            return "wrong", extracted, "extracted answer does not parse"
        if not verify(list(gold_parsed), list(pred_parsed), timeout_seconds=None):
            return "wrong", extracted, f"{pred_main[:80]!r} != {gold_main[:80]!r}"
    why = (_unevaluated(gold_main, pred_main) or _multiset_mismatch(gold_main, pred_main)
           or _condition_mismatch(gold_conds, pred_conds))
    if why:
        return "wrong", extracted, why
    return "correct", extracted, ""


def _validate_answer(answer: Any) -> tuple[bool, str]:
    if not isinstance(answer, str) or not answer.strip():
        return False, "empty reference answer"
    if len(answer) > 1000:
        return False, f"reference answer too long ({len(answer)} chars > 1000)"
    norm = normalize_answer(answer)
    if unbalanced(norm):
        return False, f"reference answer {answer[:80]!r} has unbalanced braces or brackets"
    main, _ = split_conditions(norm)
    parsed = _parse_answer(main)
    if not parsed:
        return False, f"reference answer {answer[:80]!r} has no parseable content"
    if not _has_sympy(parsed):
        return False, f"reference answer {answer[:80]!r} does not parse as mathematics (as a whole)"
    if not _looks_bare(main):
        return False, f"reference answer {answer[:80]!r} reads like prose, not a final answer"
    return True, "ok"


def _extract_only(gold: str, prediction: Any, order: tuple[str, ...]) -> tuple[str, str | None, str]:
    """("extracted", the final answer ``_grade_pair`` would compare, "") without comparing it: what a
    timed-out item keeps."""
    gold_main, _ = split_conditions(normalize_answer(gold if isinstance(gold, str) else str(gold)))
    return "extracted", extract_final_answer(prediction, order, len(split_top_level(gold_main)) if gold_main else 1), ""


def _run_op(op: str, args: tuple) -> tuple:
    if op == "grade":
        return _grade_pair(*args)
    if op == "extract":
        return _extract_only(*args)
    if op == "validate":
        ok, reason = _validate_answer(*args)
        return ("ok" if ok else "invalid", None, reason)
    raise ValueError(f"unknown op {op!r}")
