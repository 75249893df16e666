"""Role prompts: Jinja templates in ``selfevolve/prompts/roles/`` rendered to chat messages.

The chat template of the model (``tokenizer.apply_chat_template``) is applied by the backend;
this module only produces the message lists. With ``worked_example`` the real prompt is preceded
by the role's worked exchanges (``selfevolve/prompts/roles/examples.yaml``: the same template filled
with example fields, and a reply of the expected form), so a pretrained instruct model that never
saw the role tags answers in them. Records and training rows keep only the real prompt: training
teaches the format without the scaffold.
"""

from __future__ import annotations

from functools import lru_cache

import yaml

from selfevolve import prompting

ROLES = ("challenger", "planner", "solver", "critic_question", "critic_plan")
Messages = list[dict[str, str]]


def render(role: str, **fields) -> str:
    """Render the user prompt of ``role`` (one of ``ROLES``) with ``fields``.

    Raises ``KeyError`` for an unknown role and ``jinja2.UndefinedError`` when a field the
    template uses is missing.
    """
    if role not in ROLES:
        raise KeyError(f"unknown role {role!r}; expected one of {ROLES}")
    return prompting.render(f"roles/{role}", **fields)


@lru_cache(maxsize=1)
def _examples() -> dict:
    return yaml.safe_load((prompting.PROMPTS_DIR / "roles" / "examples.yaml").read_text(encoding="utf-8"))


def worked_examples(role: str, domain: str = "math", example_set: str | None = None) -> Messages:
    """The worked exchanges of ``role`` as alternating user/assistant turns: those of ``example_set``
    (a seed set's name, e.g. ``"arith"``: exchanges in that task's own form) when the role has them,
    else those of ``domain``, else the role's ``any`` (empty when none applies). Raises ``KeyError``
    for an unknown role."""
    if role not in ROLES:
        raise KeyError(f"unknown role {role!r}; expected one of {ROLES}")
    by_domain = _examples().get(role, {})
    chosen = by_domain.get(example_set) if example_set else None
    turns: Messages = []
    for ex in chosen or by_domain.get(domain, by_domain.get("any", [])):
        fields = {"domain": domain, **ex["fields"]}
        turns += [{"role": "user", "content": render(role, **fields)}, {"role": "assistant", "content": ex["completion"]}]
    return turns


def chat(role: str, prompt: str, worked_example: bool = False, domain: str = "math",
         example_set: str | None = None) -> Messages:
    """The conversation that asks ``prompt`` (a rendered ``role`` prompt), after the role's worked
    exchanges (:func:`worked_examples` of ``domain`` / ``example_set``) when ``worked_example``."""
    turns = worked_examples(role, domain, example_set) if worked_example else []
    return turns + [{"role": "user", "content": prompt}]


def messages(role: str, worked_example: bool = False, example_set: str | None = None, **fields) -> Messages:
    """``chat(role, render(role, **fields), worked_example, domain, example_set)``: the conversation the
    backend completes."""
    return chat(role, render(role, **fields), worked_example, fields.get("domain", "math"), example_set)
