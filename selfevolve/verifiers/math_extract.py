"""Final-answer extraction from untrusted model text. Pure string code: nothing here imports
math-verify, and for any input ``extract_answer`` returns a string or None and never raises.

``extract_answer`` is re-exported by ``selfevolve.verifiers.math``, whose module docstring states
the policies; ``extract_final_answer`` is the same with the number of answers the gold expects
(used by the grader, ``selfevolve.verifiers.math_compare``).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from selfevolve.verifiers.math_normalize import (
    COND_WORDS,
    MINUS_SIGNS,
    split_conditions,
    split_top_level,
    strip_wrappers,
)

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
_RUN_SEP_RE = re.compile(r"[ \t]*(?:[,;&][ \t]*)?(?:(?:and|or)[ \t]+)?", re.IGNORECASE)
_NUMBER_RE = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?![\w])")
_NUMBER_LOOSE_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_TEXTCMD_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname|mathbf)\s*\{[^{}]*\}")
_LATEXCMD_RE = re.compile(r"\\[A-Za-z]+")
_WORD_RE = re.compile(r"[A-Za-z]{2,}")
_TWO_WORDS_RE = re.compile(r"[A-Za-z]{2,}[ \t]+[A-Za-z]{2,}")
_SENTENCE_CUT_RE = re.compile(r"(?:\.\s|\.$|;|\s(?:because|since|so|which|as|and\s+so|therefore|thus)\s)", re.IGNORECASE)
_COND_CLAUSE_RE = re.compile(rf"(?i)^\s*(?:,\s*)?(?:\\forall|\\exists|(?:{COND_WORDS})(?![A-Za-z]))")
# a condition is kept with the answer only when it is mathematics ("for all $n$", "if n > 1"), not prose
_MATHY_RE = re.compile(r"[$=<>≤≥≠]|\\(?:[lg]e|[lg]eq|neq?|in|notin|forall|exists|mid)(?![A-Za-z])")
_MAX_BARE_LEN = 1000
_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)


class _Truncated:
    """A strategy found where the final answer is, and it is cut off: no answer at all."""


TRUNCATED = _Truncated()


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


def _box_spans(text: str) -> list[tuple[int, int, str | None]]:
    """``(start, end, content)`` of every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces) or
    ``\\boxed 5``, in order, innermost when nested; content None for a box that is never closed (or
    a bare ``\\boxed`` at the end). Linear in the text length (untrusted text may hold thousands
    of unclosed boxes)."""
    out: list[tuple[int, int, str | None]] = []
    matches: dict[int, int] | None = None
    for m in _BOXED_RE.finditer(text):
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            if matches is None:
                matches = _brace_matches(text)
            close = matches.get(j)
            if close is None:
                out.append((m.start(), len(text), None))
            else:
                while out and out[-1][2] is not None and out[-1][1] > close:  # keep the innermost box
                    out.pop()
                out.append((m.start(), close + 1, text[j + 1: close]))
        elif j > m.end():  # "\\boxed 5": one token
            tok = re.match(r"[^\s$]+", text[j: j + 200])
            if tok:
                out.append((m.start(), j + tok.end(), tok.group(0)))
        elif not text[j:].strip():
            out.append((m.start(), len(text), None))
    return out


def _boxes_in(text: str, arity: int) -> str | _Truncated | None:
    """The final answer among the boxes in ``text``: the last box; when the gold is a list of
    ``arity`` answers, the last boxes that together hold that many (``\\boxed{2} and \\boxed{5}``
    -> ``2, 5``; ``\\boxed{2, 5}`` alone). A box that is never closed: ``TRUNCATED``."""
    spans = _box_spans(text)
    if any(c is None for _, _, c in spans):
        return TRUNCATED
    boxes = [c.strip() for _, _, c in spans if c and c.strip()]  # type: ignore[union-attr]
    picked: list[str] = []
    items = 0
    for c in reversed(boxes):
        picked.insert(0, c)
        items += len(split_top_level(c))
        if items >= arity:
            break
    return ", ".join(picked) or None


def _looks_bare(s: str) -> bool:
    """Is ``s`` a bare answer (an expression, a list, a short value with a unit), not prose?"""
    if not s or len(s) > _MAX_BARE_LEN or "\n" in s:
        return False
    core = _LATEXCMD_RE.sub(" ", _TEXTCMD_RE.sub(" ", s))
    if _TWO_WORDS_RE.search(core):
        return False
    return len(_WORD_RE.findall(core)) <= 1


def _math_run(s: str) -> tuple[list[str], int]:
    """The math segments (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) at the start of
    ``s`` that only separators divide (``$8$, $4$``, ``$2$ and $5$``), and where they end."""
    segs: list[str] = []
    pos = len(s) - len(s.lstrip())
    while True:
        m = _MATH_SEGMENT_RE.match(s, pos)
        if not m:
            return segs, pos
        seg = next(g for g in m.groups() if g is not None).strip()
        if seg:
            segs.append(seg)
        pos = m.end()
        nxt = _RUN_SEP_RE.match(s, pos).end()
        if not _MATH_SEGMENT_RE.match(s, nxt):
            return segs, pos
        pos = nxt


def _cut_sentence(s: str) -> tuple[str, str]:
    cut = _SENTENCE_CUT_RE.search(s)
    return (s[: cut.start()], s[cut.end():]) if cut else (s, "")


def _is_condition(clause: str) -> bool:
    """Does ``clause`` start with a condition or quantifier on the answer before it, in maths?"""
    return bool(_COND_CLAUSE_RE.match(clause)) and bool(_MATHY_RE.search(clause))


def _run_answer(content: str) -> str | None:
    """A final answer written as math segments at the start of ``content``: several are one list
    answer; a condition clause after them ("$f(x)=ax+b$, where $b$ is an integer") belongs to it;
    delimiters that do not pair up (``$221,$8$``) are dropped when the sentence is a bare answer."""
    segs, end = _math_run(content)
    if not segs:
        return None
    sentence, _ = _cut_sentence(content[end:])
    if _is_condition(sentence):
        return strip_wrappers(", ".join(segs) + sentence.rstrip())
    whole = _cut_sentence(content)[0]
    if whole.count("$") % 2 and _looks_bare(whole.replace("$", "").strip()):
        return strip_wrappers(whole.replace("$", ""))
    return ", ".join(segs)


def _refine(content: str, arity: int = 1) -> str | _Truncated | None:
    """Turn the text a strategy found (tag content, "answer is" tail) into a final answer."""
    content = content.strip()
    if not content:
        return None
    boxed = _boxes_in(content, arity)
    if boxed is not None:
        return boxed
    run = _run_answer(content)
    if run:
        return run
    content = strip_wrappers(_cut_sentence(content)[0])
    if not content:
        return None
    if _looks_bare(content):
        return content
    main, conds = split_conditions(content)
    if conds and _looks_bare(main) and _MATHY_RE.search(content[len(main):]):
        return content  # "5 for all n > 1": the condition belongs to the answer
    segs = [next(g for g in m.groups() if g is not None) for m in _MATH_SEGMENT_RE.finditer(content)]
    segs = [g.strip() for g in segs if g.strip()]
    if segs:
        return segs[-1]
    nums = _NUMBER_RE.findall(content)
    return nums[-1].strip() if nums else None


def _s_answer_tag(text: str, arity: int) -> str | _Truncated | None:
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
            got = _refine(text[a:b], arity)
            if got:
                return got
        if last_open is None or last_open < spans[-1][1]:
            return None
    if last_open is not None:  # an unclosed tag at the end (truncated generation)
        return _refine(text[last_open: last_open + 2000], arity)
    return None


def _s_boxed(text: str, arity: int) -> str | _Truncated | None:
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    return _boxes_in(text, arity)


def _s_gsm8k(text: str, arity: int) -> str | _Truncated | None:
    if "####" not in text:
        return None
    for content in reversed(_GSM8K_RE.findall(text)):
        got = _refine(content, arity)
        if got:
            return got
    return None


def _s_answer_is(text: str, arity: int) -> str | _Truncated | None:
    if "nswer" not in text and "NSWER" not in text:
        return None
    # The last "answer is"/"answer:" wins ("Final Answer: The final answer is $5$" -> "5").
    for m in reversed(list(_ANSWER_IS_RE.finditer(text))):
        got = _refine(text[m.end(): m.end() + 300].split("\n", 1)[0], arity)
        if got:
            return got
    return None


def _s_bare(text: str, arity: int) -> str | None:
    s = text.strip()
    if "\\boxed" in s or "\\fbox" in s or "####" in s or "<answer" in s.lower():
        return None  # a marker whose strategy found nothing (truncated box, empty tag): no answer
    if _looks_bare(s):
        return strip_wrappers(s) or None
    if "\n" in s or len(s) > _MAX_BARE_LEN or not s.startswith(("$", "\\(", "\\[")):
        return None
    # a math answer and a condition on it, nothing else ("$f(x)=ax+b$, where $b$ is an integer")
    segs, end = _math_run(s)
    sentence, rest = _cut_sentence(s[end:])
    if segs and _is_condition(sentence) and not rest.strip():
        return strip_wrappers(", ".join(segs) + sentence.rstrip()) or None
    return None


def _s_last_number(text: str, arity: int) -> str | None:
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


def unbalanced(s: str) -> bool:
    """Is ``s`` cut off or malformed: unclosed or unopened braces, ``\\left``/``\\right`` or
    ``\\begin``/``\\end`` that do not pair up, or a different number of opening and closing
    brackets (``[2,5)`` is balanced, ``(1, 2`` is not)?"""
    depth = 0
    for m in _BRACE_TOKEN_RE.finditer(s):
        tok = m.group(0)
        depth += 1 if tok == "{" else -1 if tok == "}" else 0
        if depth < 0:
            return True
    if depth:
        return True
    if len(re.findall(r"\\left(?![A-Za-z])", s)) != len(re.findall(r"\\right(?![A-Za-z])", s)):
        return True
    if s.count("\\begin{") != s.count("\\end{"):
        return True
    plain = re.sub(r"\\[{}]", "", s)
    return plain.count("(") + plain.count("[") != plain.count(")") + plain.count("]")


def extract_final_answer(text: Any, order: Sequence[str] = DEFAULT_ORDER, arity: int = 1) -> str | None:
    """``extract_answer`` for a gold answer that is a list of ``arity`` answers: when the last
    group of boxes holds fewer, the last ``arity`` boxes are the answer. Never raises."""
    bad = [s for s in order if s not in _STRATEGY_FUNCS]
    if bad:
        raise ValueError(f"unknown extraction strategies {bad}; known: {list(STRATEGIES)}")
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str) or not text.strip():
            return None
        text = text.translate(MINUS_SIGNS)
        for name in order:
            try:
                got = _STRATEGY_FUNCS[name](text, max(1, int(arity)))
            except Exception:  # pragma: no cover - defensive: strategies are written not to raise
                got = None
            if got is TRUNCATED:
                return None
            if isinstance(got, str) and got.strip():
                got = got.strip()
                return None if unbalanced(got) else got
        return None
    except Exception:  # pragma: no cover - defensive
        return None


def extract_answer(text: Any, order: Sequence[str] = DEFAULT_ORDER) -> str | None:
    """Return the final answer in untrusted model ``text``, or None if none is found.

    Strategies (names for ``order``; the first that finds something wins):

    ``answer_tag``   content of the last ``<answer>...</answer>`` (or of an unclosed trailing
                     ``<answer>``), refined: a ``\\boxed{}`` or ``$...$`` inside wins, prose is
                     cut to its last number.
    ``boxed``        content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces
                     (escaped ``\\{`` ignored); ``\\boxed 5`` too. (The grader, knowing that the
                     gold is a list of n answers, takes the last boxes that hold n of them.)
    ``gsm8k``        the text after the last ``#### `` marker (GSM8K solutions), on its line.
    ``answer_is``    after the last "the answer is" / "final answer:" / "Answer:", up to the end of
                     the sentence; math segments there that only separators divide are one list
                     answer (``The final answer is $8$, $4$`` -> ``8, 4``), with a condition clause
                     that follows them (``$x=1$ for all $n$``).
    ``bare``         the whole text when it is short, one line and not prose (at most one word
                     of two or more letters outside LaTeX commands), e.g. ``$\\frac{1}{3},-2,5$`` or
                     ``18 dollars``; or math segments followed only by a condition clause.
    ``last_number``  the last number in the text (``1,000``, ``-3.5``, ``3/4`` forms).

    Unicode minus signs and dashes are read as ``-``. A final answer that is cut off or
    unbalanced (an unclosed ``\\boxed{``, ``(1, 2``, ``\\frac{1}{``) is no answer: None, and no
    later strategy is tried. ``order`` defaults to ``DEFAULT_ORDER`` (the list above). Unknown
    strategy names raise ``ValueError`` (a programming error, checked before the text is looked
    at); for any ``text`` whatsoever (not a string, huge, binary junk) the function returns a
    string or None and never raises.
    """
    return extract_final_answer(text, order, 1)
