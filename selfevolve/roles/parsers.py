"""Tolerant parsers for role outputs. Model outputs are untrusted text: every function here takes
any string (or None) and returns a typed result; none raises.

Each result carries ``format_reward`` r_f in [0, 1] (SAGE, docs/design.md 'Rewards'): the
fraction of the role's required tags that are present and parseable.

=============  =========================================================  =====================
role           required                                                   r_f
=============  =========================================================  =====================
Challenger     ``<question>`` + ``<answer>`` (math) or ``<tests>`` (code)  mean of the parts
Planner        ``<plan>`` with at least one step                          1 / 0.5 (empty) / 0
Solver         ``<answer>`` with non-empty content                        1 / 0.5 (empty) / 0
Critic         ``<score>`` holding a number in [0, 10]                    1 / 0.5 (bad number) / 0
=============  =========================================================  =====================

A real instruct model often writes the intent without the tags. When a tag is missing the parsers
read the same content from the forms such models use, at half the format reward (so the tags stay
worth learning): the Solver's last ``\boxed{}``, ``#### N`` or "the answer is" line (a fenced code
block for code); the Critic's "Score: 7", "7/10", "8 out of 10" or a number word ("seven out of
ten"); the Planner's numbered steps; the Challenger's question and answer under headings
("Question:" / "**Problem**" / "### Question", then "Answer:" / "Solution:", a ``\boxed{}`` answer
preferred), with the question also accepted when its closing tag is wrong (``<question>...</answer>``).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field

from selfevolve.verifiers.math_extract import extract_answer

_MAX_LEN = 200_000
#: Where a final answer is read from untagged math text (Solver), in order.
_UNTAGGED_ANSWER = ("boxed", "gsm8k", "answer_is")
#: ... and from a Challenger's answer section, which may also be the bare value or a worked solution.
_SECTION_ANSWER = ("boxed", "gsm8k", "answer_is", "bare", "last_number")
_ANY_TAG = re.compile(r"</?[A-Za-z_]+>")
_HEADING = r"(?im)^[ \t]*(?:#+[ \t]*|\*\*|__)?(?:{words})[ \t]*(?:\d+)?[ \t]*(?:\*\*|__)?[ \t]*[:.)]?[ \t]*(?:\*\*|__)?[ \t]*"
_QUESTION_HEAD = re.compile(_HEADING.format(words=r"new\s+question|new\s+problem|question|problem"))
_ANSWER_HEAD = re.compile(_HEADING.format(words=r"final\s+answer|answer|solution"))


def _text(s) -> str:
    if not isinstance(s, str):
        return ""
    return s[:_MAX_LEN]


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the last complete ``<tag>...</tag>`` in ``text``; if the closing tag is missing
    (generation cut off), the content after the last opening tag. None when the tag is absent."""
    text = _text(text)
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    end = text.rfind(close_t)
    if end != -1:
        start = text.rfind(open_t, 0, end)
        if start != -1:
            return text[start + len(open_t):end].strip()
    start = text.rfind(open_t)
    if start != -1:
        return text[start + len(open_t):].strip()
    return None


def _closed(text: str, tag: str) -> bool:
    text = _text(text)
    return f"<{tag}>" in text and f"</{tag}>" in text


def strip_code_fences(code: str) -> str:
    """Remove a surrounding Markdown code fence (```python ... ```) if present."""
    m = re.search(r"```(?:python|py)?\s*\n(.*?)```", code, flags=re.S)
    return (m.group(1) if m else code).strip("\n")


@dataclass
class ChallengerOutput:
    question: str | None
    answer: str | None = None
    tests: list[str] = field(default_factory=list)
    reference_solution: str | None = None
    format_reward: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def split_tests(block: str) -> list[str]:
    """Split a ``<tests>`` block into top-level statements (``assert ...`` lines usually).

    Uses ``ast`` when the block parses, otherwise one non-empty line per test. Never raises.
    """
    block = strip_code_fences(_text(block))
    try:
        tree = ast.parse(block)
        return [ast.get_source_segment(block, node) or "" for node in tree.body if ast.get_source_segment(block, node)]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [ln.strip() for ln in block.splitlines() if ln.strip()]


def _question_tag(text: str) -> str | None:
    """The ``<question>`` content; when its closing tag is missing or wrong (``<question>...</answer>``),
    the text up to the next tag."""
    q = extract_tag(text, "question")
    if q is None or _closed(text, "question"):
        return q
    return _ANY_TAG.split(q, 1)[0].strip()


def _headed_question(text: str) -> tuple[str | None, str | None]:
    """``(question, answer)`` written under headings ("Question: ..." then "Answer: ..."); the answer
    is read from its section (a ``\\boxed{}`` preferred). ``(None, None)`` when there is no question
    heading."""
    q = None
    for m in _QUESTION_HEAD.finditer(text):
        q = m
    if q is None:
        return None, None
    rest = text[q.end():]
    a = _ANSWER_HEAD.search(rest)
    question = _ANY_TAG.split(rest[:a.start()] if a else rest, 1)[0].strip()
    if not a:  # the answer may still be in tags (a forced answer)
        return question or None, extract_tag(text, "answer") if _closed(text, "answer") else None
    section = rest[a.end():].strip()
    return question or None, extract_answer(section, _SECTION_ANSWER) if section else None


#: A math question that states its own answer at its end ("Compute 50 + 1. Answer: 51", the way reference
#: items are shown to the Challenger): group 1 is the question, group 2 the stated answer.
_STATED_ANSWER = re.compile(r"^(.*?\S)\s*\banswer\s*:\s*(\S.*?)\s*$", re.IGNORECASE | re.DOTALL)


def parse_challenger(text, domain: str = "math") -> ChallengerOutput:
    """Parse a Challenger completion: ``<question>`` plus ``<answer>`` (math) or ``<tests>`` and
    ``<code>`` (code). r_f is the mean over the required parts of (closed tag with content); a math
    question and answer written under headings instead of tags count half each. A math question that
    ends by stating its answer ("... Answer: 51") is cut before it (it would hand the Solver the
    answer); the stated answer stands in for a missing ``<answer>``."""
    text = _text(text)
    if domain != "code" and extract_tag(text, "question") is None:
        hq, ha = _headed_question(text)
        out = ChallengerOutput(question=hq, answer=ha, format_reward=0.5 * (bool(hq) + bool(ha)) / 2)
        missing = [n for n, p in (("question", hq), ("answer", ha)) if not p]
        if missing:
            out.error = "no <question>/<answer> tags, and no " + " or ".join(missing) + " under a heading"
        return out
    q = _question_tag(text)
    parts = [bool(q) and _closed(text, "question")]
    found = [bool(q)]  # a question whose closing tag is wrong still counts (it is followed by more text)
    out = ChallengerOutput(question=q or None)
    if domain == "code":
        tag = "tests" if extract_tag(text, "tests") is not None else "test"
        tests_block = extract_tag(text, tag)
        out.tests = split_tests(tests_block) if tests_block else []
        code = extract_tag(text, "code")
        out.reference_solution = strip_code_fences(code) if code else None
        parts += [bool(out.tests) and _closed(text, tag), bool(out.reference_solution) and _closed(text, "code")]
        found += parts[1:]
        names = ("<question>", "<tests>", "<code>")
    else:
        a = extract_tag(text, "answer")
        stated = _STATED_ANSWER.match(q or "")
        if stated:
            out.question = stated.group(1)
            a = a or stated.group(2)
        out.answer = a or None
        parts.append(bool(a) and (_closed(text, "answer") or bool(stated)))  # an unclosed answer may be cut off: not an answer
        found.append(parts[-1])
        names = ("<question>", "<answer>")
    missing = [n for n, p in zip(names, found) if not p]
    out.format_reward = sum(parts) / len(parts)
    if missing:
        out.error = "missing or empty " + ", ".join(missing)
    return out


@dataclass
class PlanOutput:
    steps: list[str]
    text: str | None
    format_reward: float


_NUMBERED_STEP = re.compile(r"(?m)^[ \t]*(?:\*\*)?(?:step[ \t]*)?\d+[.):][ \t]*(?:\*\*)?[ \t]*(\S.*)$", re.IGNORECASE)


def _steps(body: str) -> list[str]:
    raw = [s for s in re.split(r"\n|(?:^|\s)(?=\d+[.)]\s)", body) if s and s.strip()]
    steps = [re.sub(r"^\s*(?:\d+[.)]|[-*])\s*", "", s).strip() for s in raw]
    return [s for s in steps if s]


def parse_plan(text) -> PlanOutput:
    """Parse a Planner completion into steps (numbered lines, bullets, or sentences). Without a
    ``<plan>`` tag, at least two numbered steps ("1. ...", "Step 2: ...") are the plan, at r_f 0.5."""
    text = _text(text)
    body = extract_tag(text, "plan")
    if body is None:
        steps = [m.group(1).strip() for m in _NUMBERED_STEP.finditer(text)]
        if len(steps) < 2:
            return PlanOutput([], None, 0.0)
        return PlanOutput(steps, "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)), 0.5)
    steps = _steps(body)
    closed = _closed(text, "plan")
    r_f = 1.0 if steps and closed else (0.5 if steps or closed else 0.0)
    return PlanOutput(steps, body or None, r_f)


@dataclass
class SolverOutput:
    answer: str | None
    format_reward: float


_FENCED_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


def parse_solver(text, domain: str = "math") -> SolverOutput:
    """Parse a Solver completion: the ``<answer>`` content (code fences stripped for code). Without
    the tag, the final answer written the usual ways (last ``\\boxed{}``, ``#### N``, "the answer is
    ...") for math, or the last fenced code block for code, at r_f 0.5."""
    text = _text(text)
    body = extract_tag(text, "answer")
    if body is None:
        if domain == "code":
            blocks = _FENCED_CODE.findall(text)
            found = blocks[-1].strip("\n") if blocks and blocks[-1].strip() else None
        else:
            found = extract_answer(text, _UNTAGGED_ANSWER)
        return SolverOutput(found, 0.5 if found else 0.0)
    if domain == "code":
        body = strip_code_fences(body)
    closed = _closed(text, "answer")
    if not body:
        return SolverOutput(None, 0.5 if closed else 0.0)
    return SolverOutput(body, 1.0 if closed else 0.5)


_SOLVER_TAGS = ["<think>", "</think>", "<answer>", "</answer>"]


def well_formed_solver(text) -> bool:
    """True when a Solver completion is written exactly in the format its prompt asks for: one
    ``<think>`` block, then one non-empty ``<answer>`` block, only whitespace around them and no
    other tag anywhere (the format rule of DeepSeek-R1's format reward, Guo et al. 2025, arXiv
    2501.12948, 2.2.2). What self-labels are chosen by: a verified answer reached with
    ``<remember>`` tags or a bare ``<answer>N</answer>`` is still a right answer, but imitated it
    teaches the shortcut (measured on SmolLM2-135M-Instruct: docs/measurements.md). Linear in the
    text; never raises."""
    text = _text(text)
    tags = list(_ANY_TAG.finditer(text))
    if [t.group(0) for t in tags] != _SOLVER_TAGS:
        return False
    outside = text[: tags[0].start()] + text[tags[1].end(): tags[2].start()] + text[tags[3].end():]
    return not outside.strip() and bool(text[tags[2].end(): tags[3].start()].strip())


_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")


def answer_code(text) -> str | None:
    """The code inside the last ``<answer>`` (as :func:`extract_tag` finds it) with the indentation
    of its lines kept (``extract_tag`` strips it), code fences removed; None when absent or blank."""
    text = _text(text)
    if not extract_tag(text, "answer"):
        return None
    open_t, close_t = "<answer>", "</answer>"
    end = text.rfind(close_t)
    start = text.rfind(open_t, 0, end) if end != -1 else -1
    if start == -1:
        start, end = text.rfind(open_t), len(text)
    code = strip_code_fences(_LEADING_BLANK_LINES.sub("", text[start + len(open_t):end]).rstrip())
    return code if code.strip() else None


@dataclass
class ScoreOutput:
    raw: float | None
    score: float
    format_reward: float


def normalise_score(raw: float | None, unparseable: float = 0.5) -> float:
    """docs/design.md: s in [0,1] stays; s in (1,10] maps to (s-1)/9; anything else -> ``unparseable``."""
    if raw is None or not math.isfinite(raw) or raw < 0 or raw > 10:
        return unparseable
    return raw if raw <= 1 else (raw - 1) / 9


_NUMBER_WORDS = {w: float(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten".split())}
_NUM = r"(-?\d+(?:\.\d+)?|" + "|".join(_NUMBER_WORDS) + r")"
_OUT_OF_TEN = re.compile(rf"(?i)(?<![\w.]){_NUM}\s*(?:/|out\s+of)\s*(?:10|ten)\b")
_SCORE_IS = re.compile(rf"(?i)\b(?:score|rating|rate|grade)\b[^\n\d]{{0,20}}?(?:is|of|:|=|as)?\s*\**\s*{_NUM}\b")


def _number(word: str) -> float | None:
    word = word.lower()
    if word in _NUMBER_WORDS:
        return _NUMBER_WORDS[word]
    try:
        return float(word)
    except (ValueError, OverflowError):
        return None


def _untagged_score(text: str) -> float | None:
    """The last "N/10" / "N out of ten", else the last "score: N" / "rating of N"."""
    for pattern in (_OUT_OF_TEN, _SCORE_IS):
        found = pattern.findall(text)
        if found:
            return _number(found[-1])
    return None


def parse_score(text, unparseable: float = 0.5) -> ScoreOutput:
    """Parse a Critic completion ``<score>N</score>`` (N may be ``7``, ``7.5``, ``7/10``). Without
    the tag, a score written as "Score: 7", "7/10", "8 out of 10" or "seven out of ten" is read at
    r_f 0.5.

    Returns the raw number (None when missing or outside [0, 10]: unparsed, which no gate passes),
    its normalised score (``unparseable`` when unparsed) and r_f.
    """
    text = _text(text)
    body = extract_tag(text, "score")
    if body is None:  # r_f: 0.5 for a score read without the tag, 0 for none
        raw, r_f, r_f_unparsed = _untagged_score(text), 0.5, 0.0
    else:  # r_f: 1 closed, 0.5 unclosed or not a number in range
        m = re.match(rf"\s*{_NUM}\s*(?:(?:/|out\s+of)\s*(?:10|ten))?", body, re.IGNORECASE)
        raw, r_f, r_f_unparsed = _number(m.group(1)) if m else None, 1.0 if _closed(text, "score") else 0.5, 0.5
    if raw is None or not math.isfinite(raw) or not 0 <= raw <= 10:
        return ScoreOutput(None, unparseable, r_f_unparsed)
    return ScoreOutput(raw, normalise_score(raw, unparseable), r_f)
