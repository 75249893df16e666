"""Math verifier: final-answer extraction from untrusted model text and equivalence checking
with the ``math-verify`` library, under wall-clock limits that always hold.

Pipeline for one (gold, prediction) pair
----------------------------------------
1. ``extract_answer(prediction_text)`` picks the final answer out of free text (strategies below,
   in a configurable order). Pure regex/string code; never raises.
2. ``normalize_answer`` pre-normalises both the gold answer and the extracted answer where
   ``math-verify`` needs help (math delimiters, thousands separators, percent signs, degree signs,
   currency, trailing plain-text units). The maths itself is left to the library.
3. ``math_verify.parse`` parses each side (wrapped in ``\\boxed{}``); if that yields no sympy
   object, the raw extracted text is handed to ``parse`` unchanged so the library's own extraction
   gets a chance; ``math_verify.verify(gold, prediction)`` decides equivalence (numbers within
   float rounding, symbolic equality, sets, intervals, tuples, matrices, equations ``x = 5``).

Policies (what counts as the same answer)
-----------------------------------------
* **Percentages**: a percent sign is a unit and is dropped: ``50%`` == ``50\\%`` == ``50 percent``
  == ``50``. ``0.5`` is *not* accepted for ``50%`` (benchmarks asking "what percent" expect 50).
* **Thousands separators**: ``1,000`` == ``1{,}000`` == ``1,\\!000`` == ``1\\,000`` == ``1 000`` ==
  ``1000`` when the whole answer is one number with well-formed 3-digit groups. ``1,2`` stays a
  list of two numbers.
* **Degrees**: a unit: ``55^\\circ`` == ``55°`` == ``55``. Radians are not converted (``\\pi/4`` !=
  ``45``).
* **Units**: ``\\text{...}``/``\\mbox{...}`` units are removed (math-verify); a plain-text unit after
  a number (``18 dollars``, ``5 cm``) is removed when it is a known unit or a word of >= 3 letters
  (so ``2 n`` stays the expression ``2n``). Currency signs (``$``, ``\\$``) are removed.
* **Fractions/decimals**: ``\\dfrac``/``\\tfrac``/``\\frac`` and ``3/4`` are the same rational;
  decimals are compared after rounding to 6 places (``0.333333`` == ``1/3``).
* **Sets/tuples/intervals**: ``1,2,3`` (a bare list) is an unordered set; ``(1,2,3)`` is an ordered
  tuple; ``[2,5)`` is an interval and differs from ``(2,5)``; a dropped element is wrong. A bare
  gold list with repeats (``-2,-2`` for "find a and b") needs as many elements in the prediction.
* **Base-n numerals**: ``52_8`` is compared by digits and base (``52_{8}``, ``(52)_8`` and ``52``
  match; ``53_8`` and ``42`` do not), since math-verify would read the subscript as an index.

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
"""

from __future__ import annotations

import atexit
import logging
import math as _pymath
import os
import re
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from functools import lru_cache
from multiprocessing.connection import wait as _mp_wait
from typing import Any, Iterable, Literal, Sequence

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

log = logging.getLogger(__name__)

MathStatus = Literal["correct", "wrong", "no_answer", "timeout", "error"]

# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

#: Strategy names understood by ``extract_answer``; ``DEFAULT_ORDER`` is tried first to last and
#: the first strategy that finds something wins.
STRATEGIES = ("answer_tag", "boxed", "gsm8k", "answer_is", "bare", "last_number")
DEFAULT_ORDER: tuple[str, ...] = STRATEGIES

_ANSWER_TAG_ANY_RE = re.compile(r"<(/?)answer>", re.IGNORECASE)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\b")
_GSM8K_RE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(
    r"(?i)\b(?:final\s+answer|the\s+answer|answer)\b\s*(?:\*\*)?\s*"
    r"(?:(?:is|would\s+be|will\s+be|should\s+be)\b\s*:?|[:=])[ \t]*(?:\*\*)?"
)
_MATH_SEGMENT_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]")
_NUMBER_RE = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?![\w])")
_NUMBER_LOOSE_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_TEXTCMD_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname|mathbf)\s*\{[^{}]*\}")
_LATEXCMD_RE = re.compile(r"\\[A-Za-z]+")
_WORD_RE = re.compile(r"[A-Za-z]{2,}")
_TWO_WORDS_RE = re.compile(r"[A-Za-z]{2,}[ \t]+[A-Za-z]{2,}")
_SENTENCE_CUT_RE = re.compile(r"(?:\.\s|\.$|;|\s(?:because|since|so|which|as|and\s+so|therefore|thus)\s)", re.IGNORECASE)
_MAX_BARE_LEN = 1000


_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)


def _brace_matches(text: str) -> dict[int, int]:
    """Index of every '{' -> index of its closing '}' (unclosed ones absent), in one linear pass.
    Escaped braces (``\\{``, ``\\}``) do not count."""
    stack: list[int] = []
    match: dict[int, int] = {}
    for m in _BRACE_TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok == "{":
            stack.append(m.start())
        elif tok == "}":
            if stack:
                match[stack.pop()] = m.start()
    return match


def _boxed_contents(text: str) -> list[str]:
    """Every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced) or ``\\boxed 5`` content, in order.
    Linear in the text length (untrusted text may hold thousands of unclosed boxes)."""
    out: list[str] = []
    matches: dict[int, int] | None = None
    for m in _BOXED_RE.finditer(text):
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            if matches is None:
                matches = _brace_matches(text)
            close = matches.get(j)
            if close is not None:
                out.append(text[j + 1 : close])
        elif j > m.end():  # "\\boxed 5": one token
            tok = re.match(r"[^\s$]+", text[j : j + 200])
            if tok:
                out.append(tok.group(0))
    return out


def _strip_wrappers(s: str) -> str:
    """Strip whitespace, markdown bold and trailing sentence punctuation."""
    prev = None
    while s != prev:
        prev = s
        s = s.strip().strip("*").strip()
        while s.endswith((".", ",", ";", ":")) and not s.endswith("\\."):
            s = s[:-1].rstrip()
    return s


def _looks_bare(s: str) -> bool:
    """Is ``s`` a bare answer (an expression, a list, a short value with a unit), not prose?"""
    if not s or len(s) > _MAX_BARE_LEN or "\n" in s:
        return False
    core = _LATEXCMD_RE.sub(" ", _TEXTCMD_RE.sub(" ", s))
    if _TWO_WORDS_RE.search(core):
        return False
    return len(_WORD_RE.findall(core)) <= 1


def _first_math_segment(s: str) -> str | None:
    s = s.lstrip()
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_):
            end = s.find(close, len(open_))
            if end > len(open_):
                return s[len(open_) : end]
            return None
    return None


def _refine(content: str) -> str | None:
    """Turn the text a strategy found (tag content, "answer is" tail) into a final answer."""
    content = content.strip()
    if not content:
        return None
    boxed = _boxed_contents(content)
    if boxed:
        return boxed[-1].strip() or None
    seg = _first_math_segment(content)
    if seg is not None and seg.strip():
        return seg.strip()
    cut = _SENTENCE_CUT_RE.search(content)
    if cut:
        content = content[: cut.start()]
    content = _strip_wrappers(content)
    if not content:
        return None
    if _looks_bare(content):
        return content
    segs = [next(g for g in m.groups() if g is not None) for m in _MATH_SEGMENT_RE.finditer(content)]
    segs = [g.strip() for g in segs if g.strip()]
    if segs:
        return segs[-1]
    nums = _NUMBER_RE.findall(content)
    return nums[-1].strip() if nums else None


def _s_answer_tag(text: str) -> str | None:
    if "<" not in text:
        return None
    # One linear pass over the tags (a lazy ``<answer>(.*?)</answer>`` regex is quadratic on text
    # with many unclosed tags). A closing tag pairs with the latest opening tag before it.
    spans: list[tuple[int, int]] = []
    last_open: int | None = None
    for m in _ANSWER_TAG_ANY_RE.finditer(text):
        if m.group(1):  # "</answer>"
            if last_open is not None:
                spans.append((last_open, m.start()))
                last_open = None
        else:
            last_open = m.end()
    if spans:
        for a, b in reversed(spans):
            got = _refine(text[a:b])
            if got:
                return got
        if last_open is None or last_open < spans[-1][1]:
            return None
    if last_open is not None:  # an unclosed tag at the end (truncated generation)
        return _refine(text[last_open : last_open + 2000])
    return None


def _s_boxed(text: str) -> str | None:
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    for content in reversed(_boxed_contents(text)):
        if content.strip():
            return content.strip()
    return None


def _s_gsm8k(text: str) -> str | None:
    if "####" not in text:
        return None
    found = _GSM8K_RE.findall(text)
    for content in reversed(found):
        got = _refine(content)
        if got:
            return got
    return None


def _s_answer_is(text: str) -> str | None:
    if "nswer" not in text and "NSWER" not in text:
        return None
    # The last "answer is"/"answer:" wins ("Final Answer: The final answer is $5$" -> "$5$").
    for m in reversed(list(_ANSWER_IS_RE.finditer(text))):
        tail = text[m.end() : m.end() + 300].split("\n", 1)[0]
        got = _refine(tail)
        if got:
            return got
    return None


def _s_bare(text: str) -> str | None:
    s = text.strip()
    if "\\boxed" in s or "\\fbox" in s or "####" in s or "<answer" in s.lower():
        return None  # a marker whose strategy found nothing (truncated box, empty tag): no answer
    if not _looks_bare(s):
        return None
    return _strip_wrappers(s) or None


def _s_last_number(text: str) -> str | None:
    nums = _NUMBER_RE.findall(text)
    if not nums:
        nums = _NUMBER_LOOSE_RE.findall(text)
    return nums[-1].strip() if nums else None


_STRATEGY_FUNCS = {
    "answer_tag": _s_answer_tag,
    "boxed": _s_boxed,
    "gsm8k": _s_gsm8k,
    "answer_is": _s_answer_is,
    "bare": _s_bare,
    "last_number": _s_last_number,
}


def extract_answer(text: Any, order: Sequence[str] = DEFAULT_ORDER) -> str | None:
    """Return the final answer in untrusted model ``text``, or None if none is found.

    Strategies (names for ``order``; the first that finds something wins):

    ``answer_tag``   content of the last ``<answer>...</answer>`` (or of an unclosed trailing
                     ``<answer>``), refined: a ``\\boxed{}`` or ``$...$`` inside wins, prose is
                     cut to its last number.
    ``boxed``        content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces
                     (escaped ``\\{`` ignored); ``\\boxed 5`` too.
    ``gsm8k``        the text after the last ``#### `` marker (GSM8K solutions), on its line.
    ``answer_is``    after the last "the answer is" / "final answer:" / "Answer:", up to the end of
                     the sentence.
    ``bare``         the whole text when it is short, one line and not prose (at most one word
                     of two or more letters outside LaTeX commands), e.g. ``$\\frac{1}{3},-2,5$`` or ``18 dollars``.
    ``last_number``  the last number in the text (``1,000``, ``-3.5``, ``3/4`` forms).

    ``order`` defaults to ``DEFAULT_ORDER`` (the list above). Unknown strategy names raise
    ``ValueError`` (a programming error, checked before the text is looked at); for any ``text``
    whatsoever (not a string, huge, binary junk) the function returns a string or None and never
    raises.
    """
    bad = [s for s in order if s not in _STRATEGY_FUNCS]
    if bad:
        raise ValueError(f"unknown extraction strategies {bad}; known: {list(STRATEGIES)}")
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str) or not text.strip():
            return None
        for name in order:
            try:
                got = _STRATEGY_FUNCS[name](text)
            except Exception:  # pragma: no cover - defensive: strategies are written not to raise
                got = None
            if got is not None and got.strip():
                return got.strip()
        return None
    except Exception:  # pragma: no cover - defensive
        return None


# --------------------------------------------------------------------------------------------
# Normalisation (before math-verify)
# --------------------------------------------------------------------------------------------

_UNIT_WORDS = {
    # short units that are also plausible variable names are only stripped when listed here
    "m", "cm", "mm", "km", "kg", "g", "mg", "l", "ml", "s", "ms", "h", "hr", "hrs", "min", "mins",
    "sec", "secs", "ft", "in", "yd", "mi", "lb", "lbs", "oz", "mph", "kph", "km/h", "m/s", "cm^2",
    "m^2", "km^2", "cm^3", "m^3", "ft^2", "in^2", "sq", "pm", "am", "usd", "ct",
}
_PERCENT_TAIL_RE = re.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\}|\\,?\s*percent(?:age)?|\\text\{\s*percent\s*\})\s*$", re.IGNORECASE)
_DEGREE_RE = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree)")
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SPACE_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?$")
_TRAILING_UNIT_RE = re.compile(r"^([-+]?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?)\s*([A-Za-z][A-Za-z./^0-9 ]*)$")


def normalize_answer(answer: Any) -> str:
    """Pre-normalise an answer string for ``math-verify`` (see the module docstring for the
    policies). Returns ``""`` for non-strings or empty input; never raises."""
    try:
        if not isinstance(answer, str):
            return ""
        s = answer.strip()
        if not s:
            return ""
        # math delimiters and currency
        s = s.replace("\\$", "")
        s = s.replace("$", "")
        for d in ("\\(", "\\)", "\\[", "\\]"):
            s = s.replace(d, "")
        s = s.replace("\\!", "").replace("{,}", ",")
        s = re.sub(r"(?<=\d)\\,(?=\d{3}(?!\d))", "", s)
        s = re.sub(r"\\(?:displaystyle|textstyle)\b", "", s)
        s = _strip_wrappers(s)
        # percent and degree signs are units
        s = _PERCENT_TAIL_RE.sub("", s)
        s = _DEGREE_RE.sub("", s)
        s = s.strip()
        # thousands separators on a single number
        if _THOUSANDS_RE.match(s):
            s = s.replace(",", "")
        elif _SPACE_THOUSANDS_RE.match(s):
            s = s.replace(" ", "")
        # trailing plain-text unit after a number
        m = _TRAILING_UNIT_RE.match(s)
        if m:
            unit = m.group(2).strip().lower().rstrip(".")
            first = unit.split()[0] if unit.split() else unit
            if unit in _UNIT_WORDS or first in _UNIT_WORDS or len(re.match(r"[a-z]*", first).group(0)) >= 3:
                num = m.group(1).strip()
                s = num.replace(",", "") if _THOUSANDS_RE.match(num) else num
        return s.strip()
    except Exception:  # pragma: no cover - defensive
        return answer.strip() if isinstance(answer, str) else ""


# --------------------------------------------------------------------------------------------
# Grading in the worker (no time limit here; the parent enforces it)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MathGrade:
    """Outcome of grading one prediction.

    ``status``: ``correct`` | ``wrong`` | ``no_answer`` (nothing extracted) | ``timeout`` (over the
    wall-clock limit; the worker was killed) | ``error`` (the gold answer does not parse, or the
    worker crashed). ``correct`` is ``status == "correct"``. ``extracted`` is the answer string
    found in the prediction (before normalisation), ``detail`` a short human-readable reason.
    """

    correct: bool
    status: MathStatus
    extracted: str | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


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


# --------------------------------------------------------------------------------------------
# The process pool (parent side)
# --------------------------------------------------------------------------------------------


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except Exception:
        return max(1, os.cpu_count() or 1)


_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ZYGOTE_CODE = "import sys; from selfevolve.verifiers.math import _zygote_main; _zygote_main(int(sys.argv[1]), int(sys.argv[2]))"
_WORKER_CODE = "import sys; from selfevolve.verifiers.math import _worker_main; _worker_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))"
_STARTUP_TIMEOUT_S = 120.0


class WorkerStartError(RuntimeError):
    """Grading worker processes could not be started (e.g. math-verify is not installed)."""


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _use_zygote() -> bool:
    import socket

    return hasattr(os, "fork") and hasattr(socket, "send_fds") and os.environ.get("SELFEVOLVE_MATH_ZYGOTE", "1") != "0"


class _Zygote:
    """Parent-side handle of the zygote process (see ``_zygote_main``)."""

    def __init__(self, memory_mb: int):
        import socket
        import subprocess
        import sys

        self.memory_mb = memory_mb
        parent_sock, child_sock = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE_CODE, str(child_sock.fileno()), str(int(memory_mb))],
                pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=_child_env(), close_fds=True, start_new_session=True,
            )
        finally:
            child_sock.close()
        self.sock = parent_sock
        self.sock.settimeout(_STARTUP_TIMEOUT_S)
        try:
            ok = self.sock.recv(1) == b"R"
        except OSError:
            ok = False
        if not ok:
            self.close()
            raise WorkerStartError(
                f"the math grading zygote did not start (exit code {self.proc.poll()}); run "
                f"`{sys.executable} -c 'import math_verify'` to see why"
            )
        self.sock.settimeout(30.0)

    def spawn(self) -> tuple[int, int]:
        """Fork a worker: (pid, socket fd of its connection). Raises OSError if the zygote is gone."""
        import socket
        import struct

        self.sock.sendall(b"F")
        msg, fds, _, _ = socket.recv_fds(self.sock, 8, 1)
        if len(msg) != 8 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("zygote closed the connection")
        return struct.unpack("q", msg)[0], fds[0]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()  # EOF: the zygote kills its workers and exits
        except Exception:
            pass
        try:
            self.proc.wait(timeout=3)
        except Exception:
            try:
                self.proc.kill()
                self.proc.wait(timeout=3)
            except Exception:
                pass


class _Worker:
    """One grading process: forked by the zygote (``pid`` + duplex socket connection), or, as a
    fallback, a fresh interpreter started with ``subprocess`` talking over two pipes. Either way
    the caller's ``__main__`` is never re-imported (no ``if __name__ == "__main__"`` needed) and
    no possibly multi-threaded parent is forked; workers' stdout is /dev/null, so they can never
    corrupt a command's JSON output."""

    __slots__ = ("pid", "proc", "rconn", "wconn", "inflight", "t0", "ready", "started")

    def __init__(self, memory_mb: int, zygote: _Zygote | None):
        from multiprocessing.connection import Connection

        self.inflight: deque = deque()
        self.t0 = 0.0
        self.ready = False
        self.started = time.monotonic()
        self.proc = None
        if zygote is not None:
            self.pid, fd = zygote.spawn()
            self.rconn = self.wconn = Connection(fd)
            return
        import subprocess
        import sys

        c_read, p_write = os.pipe()  # parent -> child
        p_read, c_write = os.pipe()  # child -> parent
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(c_read), str(c_write), str(int(memory_mb))],
                pass_fds=(c_read, c_write), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=_child_env(), close_fds=True,
            )
        finally:
            os.close(c_read)
            os.close(c_write)
        self.pid = self.proc.pid
        self.rconn = Connection(p_read, writable=False)
        self.wconn = Connection(p_write, readable=False)

    def kill(self) -> None:
        import signal

        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=5)
            except Exception:
                pass
        else:
            try:
                os.kill(self.pid, signal.SIGKILL)  # the zygote reaps it
            except OSError:
                pass
        for c in {id(self.rconn): self.rconn, id(self.wconn): self.wconn}.values():
            try:
                c.close()
            except Exception:
                pass

    def stop(self) -> None:
        try:
            self.wconn.send(None)
        except Exception:
            pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1)
            except Exception:
                pass
        self.kill()


class _MathPool:
    """Worker processes with per-item wall-clock limits enforced by the parent.

    ``run(tasks, timeout_s)`` takes ``[(op, args), ...]`` and returns ``(status, extracted,
    detail)`` tuples in order. Chunks of items go to idle workers; each item has ``timeout_s``
    seconds from when its worker started it (the previous result of that worker, or the send).
    An overrunning worker is killed and replaced (a fork of the warm zygote: milliseconds); its
    item gets ``"timeout"`` and the rest of its chunk is re-queued. Raises ``WorkerStartError``
    if workers cannot be started.
    """

    def __init__(self, workers: int, memory_mb: int = 2048):
        self.size = workers
        self.memory_mb = memory_mb
        self._workers: list[_Worker] = []
        self._zygote: _Zygote | None = None
        self._lock = threading.Lock()
        self.restarts = 0
        self._start_failures = 0

    def _new_worker(self) -> _Worker:
        if not _use_zygote():
            return _Worker(self.memory_mb, None)
        for attempt in range(2):
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.close()
                self._zygote = _Zygote(self.memory_mb)
            try:
                return _Worker(self.memory_mb, self._zygote)
            except OSError:
                self._zygote.close()
                self._zygote = None
        raise WorkerStartError("the math grading zygote stopped answering")

    def _ensure(self) -> None:
        while len(self._workers) > self.size:
            self._workers.pop().stop()
        while len(self._workers) < self.size:
            self._workers.append(self._new_worker())

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                w.stop()
            self._workers = []
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self.restarts += 1
        i = self._workers.index(w)
        self._workers[i] = self._new_worker()

    def _start_failed(self, w: _Worker, why: str) -> None:
        self._start_failures += 1
        if self._start_failures >= 3 * max(1, self.size):
            w.kill()
            self._workers.remove(w)
            raise WorkerStartError(f"math grading workers fail to start ({why})")
        self._replace(w)

    def run(self, tasks: list[tuple[str, tuple]], timeout_s: float, chunk_size: int | None = None) -> list[tuple]:
        n = len(tasks)
        if n == 0:
            return []
        with self._lock:
            self._ensure()
            nw = len(self._workers)
            if chunk_size is None:
                chunk_size = max(1, min(32, _pymath.ceil(n / (nw * 4))))
            items = [(i, op, args) for i, (op, args) in enumerate(tasks)]
            queue: deque[list] = deque(items[i : i + chunk_size] for i in range(0, n, chunk_size))
            results: list[tuple | None] = [None] * n
            remaining = n

            def finish(idx: int, res: tuple) -> None:
                nonlocal remaining
                if results[idx] is None:
                    results[idx] = res
                    remaining -= 1

            def requeue(w: _Worker) -> None:
                if w.inflight:
                    queue.appendleft(list(w.inflight))
                w.inflight = deque()

            while remaining > 0:
                # hand out chunks to idle, ready workers
                for w in list(self._workers):
                    if w.ready and not w.inflight and queue:
                        chunk = queue.popleft()
                        try:
                            w.wconn.send(chunk)
                        except (OSError, EOFError, ValueError):
                            queue.appendleft(chunk)
                            self._replace(w)
                            continue
                        w.inflight = deque(chunk)
                        w.t0 = time.monotonic()
                watched = [w for w in self._workers if w.inflight or not w.ready]
                now = time.monotonic()
                deadlines = [w.t0 + timeout_s for w in watched if w.inflight]
                deadlines += [w.started + _STARTUP_TIMEOUT_S for w in watched if not w.ready]
                wait_s = max(0.0, min(deadlines) - now) if deadlines else 0.05
                ready = _mp_wait([w.rconn for w in watched], timeout=wait_s)
                by_conn = {id(w.rconn): w for w in watched}
                for conn in ready:
                    w = by_conn[id(conn)]
                    try:
                        while conn.poll():
                            msg = conn.recv()
                            if not w.ready:
                                w.ready = msg == ("ready",)
                                if w.ready:
                                    self._start_failures = 0
                                continue
                            idx, res = msg
                            while w.inflight and w.inflight[0][0] != idx:
                                w.inflight.popleft()  # pragma: no cover - defensive
                            if w.inflight:
                                w.inflight.popleft()
                            finish(idx, tuple(res))
                            w.t0 = time.monotonic()
                            if not w.inflight:
                                break
                    except (EOFError, OSError):
                        # the worker died (out of memory, crash): blame the item it was on
                        if not w.ready:
                            self._start_failed(w, "exited during start-up")
                            continue
                        if w.inflight:
                            idx = w.inflight.popleft()[0]
                            finish(idx, ("error", None, "grading worker died (crash or out of memory)"))
                        requeue(w)
                        self._replace(w)
                now = time.monotonic()
                for w in list(self._workers):
                    if w.inflight and now - w.t0 > timeout_s:
                        idx = w.inflight.popleft()[0]
                        finish(idx, ("timeout", None, f"grading took longer than {timeout_s:g} s; worker killed"))
                        requeue(w)
                        self._replace(w)
                    elif not w.ready and now - w.started > _STARTUP_TIMEOUT_S:
                        self._start_failed(w, f"not ready after {_STARTUP_TIMEOUT_S:g} s")
            return [r if r is not None else ("error", None, "not graded") for r in results]


_POOL: _MathPool | None = None
_POOL_LOCK = threading.Lock()


def _get_pool(workers: int) -> _MathPool:
    global _POOL
    size = workers if workers > 0 else _cpu_count()
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _MathPool(size)
        else:
            with _POOL._lock:
                _POOL.size = size  # workers are added or stopped on the next run; the zygote stays
        return _POOL


def shutdown_pool() -> None:
    """Stop the grading worker processes (they are restarted on the next call). Registered atexit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.close()
            _POOL = None


atexit.register(shutdown_pool)


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
    ``order``). Each pair gets ``timeout_s`` seconds of wall clock in a worker process; a pair that
    overruns gets status ``"timeout"`` (its worker is killed and replaced, other pairs are
    unaffected). ``workers``: number of worker processes, 0 = one per available core. Pairs are
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
    results = _get_pool(workers).run(tasks, timeout_s)
    return [_to_grade(r) for r in results]


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

    Returns ``(True, "ok")`` when it is a non-empty string of at most 1,000 characters that
    math-verify parses into a mathematical object within ``timeout_s``; otherwise ``(False,
    reason)``. Never raises for bad input.
    """
    return validate_math_answers([answer], timeout_s=timeout_s)[0]
