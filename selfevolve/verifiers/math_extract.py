"""Final-answer extraction from untrusted model text, and pre-normalisation of answer strings
for ``math-verify``. Pure string code: nothing here imports math-verify, and for any input the
public functions return a value and never raise (model outputs are untrusted).

``extract_answer`` and ``normalize_answer`` are re-exported by ``selfevolve.verifiers.math``, whose
module docstring states the policies they implement.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

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
