"""Equivalence of a gold answer and a prediction, as run inside a grading worker process (no time
limit here: ``selfevolve.verifiers.math_pool`` kills a worker that overruns). Parsing and
comparison are math-verify's; this module adds the policies of ``selfevolve.verifiers.math``
that the library does not have (base-n numerals, repeated list elements) and the reference-answer
check used by ``validate_math_answer``.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any, Sequence

from selfevolve.verifiers.math_extract import _looks_bare, extract_answer, normalize_answer


def _has_sympy(parsed: Sequence[Any]) -> bool:
    return any(not isinstance(x, str) for x in parsed)


def _cache_size() -> int:
    try:
        return max(0, int(os.environ.get("SELFEVOLVE_MATH_PARSE_CACHE", "4096")))
    except ValueError:
        return 4096


@lru_cache(maxsize=_cache_size())
def _parse_answer(answer: str) -> tuple:
    """Parse an (extracted or gold) answer string with math-verify; a tuple of candidates
    (sympy objects and/or string fallbacks), empty when nothing is found. No time limit.
    Cached per worker (gold answers and common predictions repeat across samples); the cache
    size is ``$SELFEVOLVE_MATH_PARSE_CACHE`` entries (default 4096, 0 disables it)."""
    from math_verify import parse

    norm = normalize_answer(answer)
    if not norm:
        return ()
    parsed = parse("\\boxed{" + norm + "}", parsing_timeout=None)
    if _has_sympy(parsed):
        return tuple(parsed)
    raw = parse(answer, parsing_timeout=None)
    if _has_sympy(raw):
        return tuple(raw)
    return tuple(parsed or raw)


_BASE_N_RE = re.compile(r"^\(?([0-9A-Za-z]+)\)?_\{?(\d+)\}?$")
_DIGITS_RE = re.compile(r"^([0-9A-Za-z]+)$")


def _split_top_level(s: str) -> list[str]:
    """Split on commas outside (), [], {} (a bare answer list such as ``-2,-2``)."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def _multiset_mismatch(gold_norm: str, pred_norm: str) -> str | None:
    """math-verify compares a bare list ``a, b`` as a set, so ``-2,-2`` (``a = b = -2``) would
    equal ``-2``. When the gold list repeats an element, the prediction must list as many."""
    g = _split_top_level(gold_norm)
    if len(g) < 2 or len(set(g)) == len(g):
        return None
    p = _split_top_level(pred_norm)
    if len(p) != len(g):
        return f"expected {len(g)} answers (with repeats), got {len(p)}"
    return None


def _grade_pair(gold: str, prediction: Any, order: tuple[str, ...]) -> tuple[str, str | None, str]:
    """(status, extracted, detail) for one pair, in-process and without a time limit."""
    from math_verify import verify

    extracted = extract_answer(prediction, order)
    if extracted is None:
        return "no_answer", None, "no final answer found in the prediction"
    gold_parsed = _parse_answer(gold if isinstance(gold, str) else str(gold))
    if not gold_parsed:
        return "error", extracted, f"reference answer {str(gold)[:80]!r} does not parse"
    pred_parsed = _parse_answer(extracted)
    if not pred_parsed:
        return "wrong", extracted, "extracted answer does not parse"
    gold_norm, pred_norm = normalize_answer(gold), normalize_answer(extracted)
    base = _BASE_N_RE.match(gold_norm)
    if base:
        # "52_8" is a numeral in base 8: math-verify reads the subscript as an index symbol and
        # would accept any other numeral in the same base, so compare digits and base exactly.
        pm = _BASE_N_RE.match(pred_norm) or _DIGITS_RE.match(pred_norm)
        same = bool(pm) and pm.group(1).upper() == base.group(1).upper() and (
            pm.lastindex is None or pm.lastindex < 2 or pm.group(2) == base.group(2))
        if same:
            return "correct", extracted, ""
        return "wrong", extracted, f"{pred_norm[:80]!r} != {gold_norm[:80]!r} (base-{base.group(2)} numeral)"
    ok = verify(list(gold_parsed), list(pred_parsed), timeout_seconds=None)
    if ok:
        why = _multiset_mismatch(gold_norm, pred_norm)
        if why:
            return "wrong", extracted, why
        return "correct", extracted, ""
    return "wrong", extracted, f"{pred_norm[:80]!r} != {gold_norm[:80]!r}"


def _validate_answer(answer: Any) -> tuple[bool, str]:
    if not isinstance(answer, str) or not answer.strip():
        return False, "empty reference answer"
    if len(answer) > 1000:
        return False, f"reference answer too long ({len(answer)} chars > 1000)"
    parsed = _parse_answer(answer)
    if not parsed:
        return False, f"reference answer {answer[:80]!r} has no parseable content"
    if not _has_sympy(parsed):
        return False, f"reference answer {answer[:80]!r} does not parse as mathematics"
    if not _looks_bare(normalize_answer(answer)):
        return False, f"reference answer {answer[:80]!r} reads like prose, not a final answer"
    return True, "ok"


def _run_op(op: str, args: tuple) -> tuple:
    if op == "grade":
        return _grade_pair(*args)
    if op == "validate":
        ok, reason = _validate_answer(*args)
        return ("ok" if ok else "invalid", None, reason)
    raise ValueError(f"unknown op {op!r}")
