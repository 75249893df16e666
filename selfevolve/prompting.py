"""Prompt templates: one Jinja environment over ``selfevolve/prompts/``.

Every prompt the pipeline sends is a template in that folder, named by its path without ``.j2``:
``roles/<role>`` (the four SAGE roles), ``evaluation/<family>`` (benchmark prompts) and
``mass/<name>`` (workflow proposal, merge and pairwise judgement). Templates use strict undefined
variables: a field the template needs and the caller did not give raises
``jinja2.UndefinedError`` instead of rendering an empty string.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

#: The folder holding every template (a DVC dependency of the stages that render them).
PROMPTS_DIR = Path(__file__).with_name("prompts")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared environment (cached): package loader, strict undefined, no autoescape."""
    return jinja2.Environment(loader=jinja2.PackageLoader("selfevolve", "prompts"), undefined=jinja2.StrictUndefined,
                              autoescape=False, keep_trailing_newline=False)


def render(name: str, **fields: Any) -> str:
    """Render template ``name`` (e.g. ``"roles/solver"``) with ``fields``, stripped of surrounding
    white space. Raises ``jinja2.TemplateNotFound`` for an unknown name and
    ``jinja2.UndefinedError`` when a field the template uses is missing."""
    return environment().get_template(f"{name}.j2").render(**fields).strip()
