"""Derived seeds: every random choice of the pipeline is seeded from ``params.seed`` and a name.

``derive_seed(params.seed, cycle, stage)`` gives each stage (and each purpose inside a stage) its
own reproducible stream, independent of which other stages ran before it in the same process.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A 32-bit seed from ``parts`` (SHA-256 of their ``str`` joined by ``/``): the same parts give
    the same seed on every machine and Python version (unlike ``hash``)."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def derived_rng(*parts: Any) -> random.Random:
    """``random.Random(derive_seed(*parts))``."""
    return random.Random(derive_seed(*parts))
