"""String normalisation of answers before ``math-verify`` parses them, and the string helpers the
extraction and comparison share: Unicode signs, delimiters, thousands separators, percent and
degree signs, units, top-level list splitting and condition/quantifier splitting. Pure string
code: never imports math-verify, never raises for any input.

``normalize_answer`` is re-exported by ``selfevolve.verifiers.math``, whose module docstring states
the policies.
"""

from __future__ import annotations

import re
from typing import Any

# --------------------------------------------------------------------------------------------
# Unicode signs
# --------------------------------------------------------------------------------------------

#: minus signs and dashes read as "-" (also by the extraction, so "−3" is the number -3)
MINUS_SIGNS = str.maketrans({c: "-" for c in "\u2212\u2012\u2013\u2010\u2011\ufe63\uff0d"})
_UNICODE_LATEX = {
    "×": "\\times ", "÷": "\\div ", "·": "\\cdot ", "⋅": "\\cdot ", "≤": "\\le ", "⩽": "\\le ", "≥": "\\ge ",
    "⩾": "\\ge ", "≠": "\\ne ", "±": "\\pm ", "∓": "\\mp ", "π": "\\pi ", "∞": "\\infty ", "∈": "\\in ",
    "∉": "\\notin ", "∪": "\\cup ", "∩": "\\cap ", "∀": "\\forall ", "∃": "\\exists ", "→": "\\to ",
    "²": "^{2}", "³": "^{3}", "½": "\\frac{1}{2}", "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}", "¼": "\\frac{1}{4}",
    "¾": "\\frac{3}{4}", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE_LATEX)))
# "√12" is the root of 12 (in LaTeX "\sqrt12" would be \sqrt{1}2): the whole number or one letter
_UNICODE_SQRT_RE = re.compile(r"√\s*(\d+(?:\.\d+)?|[A-Za-z])")


def unicode_to_latex(s: str) -> str:
    """Unicode minus signs and dashes -> ``-``; other Unicode math signs (× ÷ · ≤ ≥ ≠ ± √ π ∞ ∈ ∀
    ∃ ² ½ ...) -> their LaTeX commands."""
    s = s.translate(MINUS_SIGNS)
    if s.isascii():
        return s
    s = _UNICODE_SQRT_RE.sub(r"\\sqrt{\1}", s).replace("√", "\\sqrt")
    return _UNICODE_RE.sub(lambda m: _UNICODE_LATEX[m.group(0)], s)


def _fix_sqrt_parens(s: str) -> str:
    """``\\sqrt(2)`` -> ``\\sqrt{2}`` (balanced parentheses; math-verify would mangle it)."""
    out, i = [], 0
    while True:
        j = s.find("\\sqrt(", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        depth, k = 0, j + 5
        while k < len(s):
            depth += {"(": 1, ")": -1}.get(s[k], 0)
            if depth == 0:
                break
            k += 1
        if k >= len(s):  # unbalanced: leave as is
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j] + "\\sqrt{" + s[j + 6:k] + "}")
        i = k + 1


# --------------------------------------------------------------------------------------------
# Shared string helpers
# --------------------------------------------------------------------------------------------


def strip_wrappers(s: str) -> str:
    """Strip whitespace, markdown bold and trailing sentence punctuation."""
    prev = None
    while s != prev:
        prev = s
        s = s.strip().strip("*").strip()
        while s.endswith((".", ",", ";", ":")) and not s[:-1].endswith("\\"):
            s = s[:-1].rstrip()
    return s


def split_top_level(s: str) -> list[str]:
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


def _depths(s: str) -> list[int]:
    """Bracket depth before each character of ``s``."""
    out, depth = [], 0
    for ch in s:
        out.append(depth)
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return out


# --------------------------------------------------------------------------------------------
# Conditions and quantifiers ("g(t) = 0 for all t > 1", "\forall t>1, g(t)=0")
# --------------------------------------------------------------------------------------------

COND_WORDS = (r"for|if|when|whenever|where|with|provided(?:\s+that)?|unless|except|such\s+that|"
              r"as\s+long\s+as|there\s+(?:exists?|is|are)")
_COND_WORD_RE = re.compile(rf"(?i)(?<![A-Za-z\\])(?:{COND_WORDS})(?![A-Za-z])")
_COND_TEXT_RE = re.compile(r"\\(?:text|mbox|textrm|textnormal|mathrm|textit|textbf)\s*\{([^{}]*)\}")
_MARKER_RE = re.compile(rf"(?i)\\(?:forall|exists)(?![A-Za-z])|(?<![A-Za-z\\])(?:{COND_WORDS})(?![A-Za-z])")
_QUANT_WORDS_RE = re.compile(r"(?i)^\s*(?:all|every|each|any|some)(?![A-Za-z])\s*")
_LEAD_SEP_RE = re.compile(r",|:|\\q?quad(?![A-Za-z])|\\;")
_TAIL_SPACING = ("\\qquad", "\\quad", "\\,", "\\;", "\\:", "\\!", "\\ ")


def _strip_tail_spacing(s: str) -> str:
    """Strip trailing whitespace, commas, colons and LaTeX spacing (``\\quad``, ``\\,`` ...)."""
    while True:
        t = s.rstrip(" \t\n")
        for tok in _TAIL_SPACING:
            if t.endswith(tok):
                t = t[: -len(tok)]
                break
        else:
            if t and t[-1] in ",;:~" and not t[:-1].endswith("\\"):
                t = t[:-1]
        if t == s:
            return s
        s = t


def _kind(marker: str, rest: str) -> str:
    m = marker.lower()
    if "exist" in m or m.startswith("there") or (m == "for" and re.match(r"(?i)\s*some(?![A-Za-z])", rest)):
        return "exists"
    if m in ("unless", "except"):
        return "unless"
    return "cond"


def _clean_condition(c: str) -> str:
    c = _QUANT_WORDS_RE.sub("", c)
    return strip_wrappers(c.strip().lstrip(",:").strip())


def split_conditions(s: str) -> tuple[str, list[tuple[str, str]]]:
    """Split a normalised answer into its main part and its conditions/quantifiers.

    ``"g(t) = 0 \\text{ for all } t > 1"`` -> ``("g(t) = 0", [("cond", "t > 1")])``;
    ``"\\forall t>1, g(t)=0"`` -> ``("g(t)=0", [("cond", "t>1")])``; ``"\\exists ..."``/"there
    exists"/"for some" give kind ``exists``, "unless"/"except" kind ``unless``. Markers are found
    only outside brackets; an answer without one gives ``(s, [])``.
    """
    if not s or not _MARKER_RE.search(s):
        return s, []
    original = s
    # a \text{...} holding a condition word is read as plain words
    s = _COND_TEXT_RE.sub(lambda m: " " + m.group(1) + " " if _COND_WORD_RE.search(m.group(1)) else m.group(0), s)
    depth = _depths(s)
    conds: list[tuple[str, str]] = []
    main = s.strip()
    lead = _MARKER_RE.match(main)
    if lead:
        d = _depths(main)
        sep = next((m for m in _LEAD_SEP_RE.finditer(main, lead.end()) if d[m.start()] == 0), None)
        if sep is None:
            return original, []
        rest = main[lead.end():sep.start()]
        conds.append((_kind(lead.group(0).lstrip("\\"), rest), _clean_condition(rest)))
        main = main[sep.end():].strip()
        depth = _depths(main)
        s = main
    trail = next((m for m in _MARKER_RE.finditer(s) if m.start() > 0 and depth[m.start()] == 0), None)
    if trail is not None:
        rest = s[trail.end():]
        conds.append((_kind(trail.group(0).lstrip("\\"), rest), _clean_condition(rest)))
        main = _strip_tail_spacing(s[:trail.start()])
    return (main, conds) if conds else (original, [])


# --------------------------------------------------------------------------------------------
# normalize_answer
# --------------------------------------------------------------------------------------------

_UNIT_WORDS = {
    # short units that are also plausible variable names are only stripped when listed here
    "m", "cm", "mm", "km", "kg", "g", "mg", "l", "ml", "s", "ms", "h", "hr", "hrs", "min", "mins",
    "sec", "secs", "ft", "in", "yd", "mi", "lb", "lbs", "oz", "mph", "kph", "km/h", "m/s", "cm^2",
    "m^2", "km^2", "cm^3", "m^3", "ft^2", "in^2", "sq", "pm", "am", "usd", "ct",
}
# words after a number that are not units (a list, a range, a condition)
_NOT_UNIT_WORDS = {"and", "or", "to", "through", "then", "but", "nor", "plus", "minus", "times", "over", "all",
                   "for", "if", "when", "whenever", "where", "with", "provided", "unless", "except", "such", "there"}
# (no leading \s*: on a long run of spaces an unanchored "\s*X" is quadratic; spaces are stripped after)
_PERCENT_TAIL_RE = re.compile(r"(?:\\%|%|\\text\{\s*\\?%\s*\}|\\,?\s*percent(?:age)?|\\text\{\s*percent\s*\})\s*$", re.IGNORECASE)
_DEGREE_RE = re.compile(r"(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree)")
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SPACE_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?$")
_TRAILING_UNIT_RE = re.compile(r"^([-+]?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?)(\s*)([A-Za-z][A-Za-z./^0-9 ]*)$")
# a trailing \text{...} unit (with an optional ^2/^3) after a value: "10\text{ cm}", "864 \mbox{ inches}^2"
_TEXT_UNIT_RE = re.compile(r"^(.*?[\w}).\]])(?:\s|~|\\[,;! ])*\\(?:text|mbox|textrm|textnormal|mathrm|textit|textbf)"
                           r"\s*\{([^{}]*)\}(?:\s*\^\s*\{?\s*[23]\s*\}?)?\s*$", re.DOTALL)
_UPRIGHT_CONSTANT_RE = re.compile(r"\\(?:mathrm|rm|text)\s*\{\s*([ei])\s*\}")


def _strip_text_unit(s: str) -> str:
    m = _TEXT_UNIT_RE.match(s)
    if not m:
        return s
    content = m.group(2).strip()
    words = re.findall(r"[A-Za-z]+", content)
    if not words or words[0].lower() in _NOT_UNIT_WORDS or content.startswith(",") or _MARKER_RE.search(m.group(1)):
        return s  # not a unit: a connective, or part of a condition ("0 \text{ if } n \text{ odd}")
    return m.group(1).rstrip()


def _strip_word_unit(s: str) -> str:
    m = _TRAILING_UNIT_RE.match(s)
    if not m:
        return s
    unit = m.group(3).strip().lower().rstrip(".")
    first = unit.split()[0] if unit.split() else unit
    if first in _NOT_UNIT_WORDS:
        return s
    letters = len(re.match(r"[a-z]*", first).group(0))
    # a known unit, or a word of >= 3 letters; one attached letter ("2h", "5m") stays a symbol
    if (unit in _UNIT_WORDS or first in _UNIT_WORDS) and (letters > 1 or m.group(2)) or letters >= 3:
        num = m.group(1).strip()
        return num.replace(",", "") if _THOUSANDS_RE.match(num) else num
    return s


def normalize_answer(answer: Any) -> str:
    """Pre-normalise an answer string for ``math-verify`` (see the module docstring of
    ``selfevolve.verifiers.math`` for the policies). Returns ``""`` for non-strings or empty
    input; never raises."""
    try:
        if not isinstance(answer, str):
            return ""
        s = unicode_to_latex(answer.strip())
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
        s = _UPRIGHT_CONSTANT_RE.sub(r"\1", s)  # upright e and i are the constants, not units
        for _ in range(8):  # nested \sqrt( are fixed from the outside in
            fixed = _fix_sqrt_parens(s) if "\\sqrt(" in s else s
            if fixed == s:
                break
            s = fixed
        s = strip_wrappers(s)
        # percent and degree signs are units
        s = _strip_tail_spacing(_PERCENT_TAIL_RE.sub("", s))
        s = re.sub(r"(?<![ \t])[ \t]+(?=\^\s*\{?\s*\\circ|°|\\degree)", "", s)  # "55 °" -> "55"
        s = _DEGREE_RE.sub("", s).strip()
        # thousands separators on a single number
        if _THOUSANDS_RE.match(s):
            s = s.replace(",", "")
        elif _SPACE_THOUSANDS_RE.match(s):
            s = s.replace(" ", "")
        # trailing units: \text{...} after a value, plain words after a number
        s = _strip_text_unit(s)
        s = _strip_word_unit(s)
        return strip_wrappers(_strip_tail_spacing(s))
    except Exception:  # pragma: no cover - defensive
        return answer.strip() if isinstance(answer, str) else ""
