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
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field

_MAX_LEN = 200_000


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


def parse_challenger(text, domain: str = "math") -> ChallengerOutput:
    """Parse a Challenger completion: ``<question>`` plus ``<answer>`` (math) or ``<tests>`` and
    ``<code>`` (code). r_f is the mean over the required parts of (closed tag with content)."""
    text = _text(text)
    q = extract_tag(text, "question")
    parts = [bool(q) and _closed(text, "question")]
    out = ChallengerOutput(question=q or None)
    if domain == "code":
        tests_block = extract_tag(text, "tests")
        out.tests = split_tests(tests_block) if tests_block else []
        code = extract_tag(text, "code")
        out.reference_solution = strip_code_fences(code) if code else None
        parts += [bool(out.tests) and _closed(text, "tests"), bool(out.reference_solution) and _closed(text, "code")]
        missing = [n for n, p in zip(("<question>", "<tests>", "<code>"), parts) if not p]
    else:
        a = extract_tag(text, "answer")
        out.answer = a or None
        parts.append(bool(a) and _closed(text, "answer"))
        missing = [n for n, p in zip(("<question>", "<answer>"), parts) if not p]
    out.format_reward = sum(parts) / len(parts)
    if missing:
        out.error = "missing or empty " + ", ".join(missing)
    return out


@dataclass
class PlanOutput:
    steps: list[str]
    text: str | None
    format_reward: float


def parse_plan(text) -> PlanOutput:
    """Parse a Planner completion into steps (numbered lines, bullets, or sentences)."""
    body = extract_tag(text, "plan")
    if body is None:
        return PlanOutput([], None, 0.0)
    raw = [s for s in re.split(r"\n|(?:^|\s)(?=\d+[.)]\s)", body) if s and s.strip()]
    steps = [re.sub(r"^\s*(?:\d+[.)]|[-*])\s*", "", s).strip() for s in raw]
    steps = [s for s in steps if s]
    closed = _closed(text, "plan")
    r_f = 1.0 if steps and closed else (0.5 if steps or closed else 0.0)
    return PlanOutput(steps, body or None, r_f)


@dataclass
class SolverOutput:
    answer: str | None
    format_reward: float


def parse_solver(text, domain: str = "math") -> SolverOutput:
    """Parse a Solver completion: the ``<answer>`` content (code fences stripped for code)."""
    body = extract_tag(text, "answer")
    if body is None:
        return SolverOutput(None, 0.0)
    if domain == "code":
        body = strip_code_fences(body)
    closed = _closed(text, "answer")
    if not body:
        return SolverOutput(None, 0.5 if closed else 0.0)
    return SolverOutput(body, 1.0 if closed else 0.5)


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


def parse_score(text, unparseable: float = 0.5) -> ScoreOutput:
    """Parse a Critic completion ``<score>N</score>`` (N may be ``7``, ``7.5``, ``7/10``).

    Returns the raw number (None when missing or outside [0, 10]), its normalised score and r_f.
    """
    body = extract_tag(text, "score")
    if body is None:
        return ScoreOutput(None, unparseable, 0.0)
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*10)?", body)
    raw = None
    if m:
        try:
            raw = float(m.group(1))
        except (ValueError, OverflowError):
            raw = None
    if raw is None or not math.isfinite(raw) or not 0 <= raw <= 10:
        return ScoreOutput(None, unparseable, 0.5)
    return ScoreOutput(raw, normalise_score(raw, unparseable), 1.0 if _closed(text, "score") else 0.5)
