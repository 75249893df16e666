"""The ``paper`` seed set: real items from GSM8K train, MATH train, HumanEval and MBPP train ids,
as in the SAGE paper's 500-item seed set (equal shares by default), loaded from local files
(``../shared/benchmarks`` in tests) or through ``datasets`` when online
(``selfevolve.questions.benchmarks.load_benchmark``).

Validation: GSM8K train items not in the seed set and MBPP validation ids (511-600).
Held-out: GSM8K test and MATH-500 (half each).
"""

from __future__ import annotations

import random
from pathlib import Path

from selfevolve.records import Question


def load(data_dir: str | Path, size: int = 500, n_val: int = 100, n_heldout: int = 200, seed: int = 0) -> tuple[list[Question], list[Question], list[Question]]:
    """(seed pool, validation, held-out). Raises ``FileNotFoundError`` naming the missing file."""
    from selfevolve.questions.benchmarks import load_benchmark

    rng = random.Random(seed)
    gsm_train = load_benchmark("gsm8k-train", data_dir=data_dir)
    math_train = load_benchmark("math-train", data_dir=data_dir)
    humaneval = load_benchmark("humaneval", data_dir=data_dir)
    mbpp_train = load_benchmark("mbpp", data_dir=data_dir, split="train")
    mbpp_val = load_benchmark("mbpp", data_dir=data_dir, split="validation")
    share = size // 4
    gsm_pick = rng.sample(gsm_train, min(len(gsm_train), share + n_val))
    parts = [gsm_pick[:share], rng.sample(math_train, min(len(math_train), share)),
             rng.sample(humaneval, min(len(humaneval), share)), rng.sample(mbpp_train, min(len(mbpp_train), size - 3 * share))]
    pool = _prefixed([q for part in parts for q in part], seed_source=True)
    val_pool = gsm_pick[share:] + mbpp_val
    val = rng.sample(val_pool, min(n_val, len(val_pool)))
    gsm_test = load_benchmark("gsm8k", data_dir=data_dir)
    math500 = load_benchmark("math500", data_dir=data_dir)
    held = rng.sample(gsm_test, min(len(gsm_test), n_heldout // 2)) + rng.sample(math500, min(len(math500), n_heldout - n_heldout // 2))
    return pool, _prefixed(val), _prefixed(held)


def _prefixed(questions: list[Question], seed_source: bool = False) -> list[Question]:
    """Prefix ids with their benchmark: ids collide across files (GSM8K line "601", MBPP task 601)."""
    out = []
    for q in questions:
        bench = q.source.split(":")[-1]
        update = {"id": f"{bench}-{q.id}"}
        if seed_source:
            update["source"] = f"seed:{bench}"
        out.append(q.model_copy(update=update))
    return out
