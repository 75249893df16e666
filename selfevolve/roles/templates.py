"""Role prompts: Jinja templates in ``selfevolve/prompts/roles/`` rendered to chat messages.

The chat template of the model (``tokenizer.apply_chat_template``) is applied by the backend;
this module only produces the message lists.
"""

from __future__ import annotations

from selfevolve import prompting

ROLES = ("challenger", "planner", "solver", "critic_question", "critic_plan")


def render(role: str, **fields) -> str:
    """Render the user prompt of ``role`` (one of ``ROLES``) with ``fields``.

    Raises ``KeyError`` for an unknown role and ``jinja2.UndefinedError`` when a field the
    template uses is missing.
    """
    if role not in ROLES:
        raise KeyError(f"unknown role {role!r}; expected one of {ROLES}")
    return prompting.render(f"roles/{role}", **fields)


def messages(role: str, **fields) -> list[dict[str, str]]:
    """``[{"role": "user", "content": render(role, **fields)}]``: the chat turn the backend completes."""
    return [{"role": "user", "content": render(role, **fields)}]
