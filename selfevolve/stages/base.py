"""Stages before the first cycle: ``seeds`` (seed set = pool of the base cycle, validation and
held-out questions) and ``bootstrap`` (the embedded tiny model)."""

from __future__ import annotations

from pathlib import Path

from selfevolve.config import Params
from selfevolve.paths import cycle_paths
from selfevolve.records import Question, read_jsonl, write_jsonl


def _disjoint(questions: list[Question], taken: set[str]) -> list[Question]:
    out = []
    for q in questions:
        if q.text not in taken:
            taken.add(q.text)
            out.append(q)
    return out


def load_seed_set(params: Params, root=".") -> tuple[list[Question], list[Question], list[Question]]:
    """(seed pool, validation, held-out) for ``params.seeds.set``; texts never repeat across the three.

    * ``arith``: generated (levels 1-5 for all three; the Challenger can go beyond).
    * ``tiny-code``: generated small Python functions with assert tests.
    * ``paper``: GSM8K train, MATH train, HumanEval and MBPP train items (SAGE paper, 500 by
      default) from ``seeds.data_dir``; validation from MBPP validation ids + GSM8K train, held-out
      from GSM8K test and MATH-500.
    * a ``.jsonl``/``.json`` file (relative to the project root): ``Question`` records or rows with
      question/answer fields, shuffled with ``seed`` and split into held-out, validation and pool.

    Raises ``FileNotFoundError`` naming ``seeds.data_dir`` when the paper set's files are missing, and
    ``RecordFileError`` (file, line, field) for a malformed seed file.
    """
    s = params.seeds
    n_val = max(1, s.heldout_size // 2)
    if s.set == "arith":
        from selfevolve.seeds import arith

        taken: set[str] = set()
        pool = _disjoint(arith.generate(s.size, seed=params.seed, prefix="seed"), taken)
        val = _disjoint(arith.generate(n_val * 2, seed=params.seed + 10_001, prefix="val"), taken)[:n_val]
        held = _disjoint(arith.generate(s.heldout_size * 2, seed=params.seed + 20_002, prefix="heldout"), taken)[: s.heldout_size]
        return pool, val, held
    if s.set.endswith((".jsonl", ".json")):
        import random

        from selfevolve.evaluation.benchmarks import load_benchmark

        path = Path(s.set) if Path(s.set).is_absolute() else Path(root) / s.set
        items = load_benchmark(path)
        random.Random(params.seed).shuffle(items)
        held, val = items[: s.heldout_size], items[s.heldout_size: s.heldout_size + n_val]
        return items[s.heldout_size + n_val: s.heldout_size + n_val + s.size], val, held
    if s.set == "tiny-code":
        from selfevolve.seeds import tiny_code

        return tiny_code.split(s.size, n_val, s.heldout_size, seed=params.seed)
    from selfevolve.seeds import paper

    data_dir = Path(s.data_dir)
    if not data_dir.is_absolute():
        data_dir = Path(root) / data_dir
    return paper.load(data_dir, size=s.size, n_val=n_val, n_heldout=s.heldout_size, seed=params.seed)


def seeds(params: Params, root=".") -> dict:
    """Write ``data/cycles/base/{pool,val,heldout}.jsonl``."""
    pool, val, held = load_seed_set(params, root)
    base = cycle_paths("base", root)
    write_jsonl(base.pool, pool)
    write_jsonl(base.val, val)
    write_jsonl(base.heldout, held)
    return {"seed_questions": len(pool), "val_questions": len(val), "heldout_questions": len(held)}


def bootstrap(params: Params, root=".") -> dict:
    """Build the embedded tiny model into ``models/base``. When ``model.base`` names another model
    (a hub id or local path from a preset), nothing is trained: ``models/base/reference.json``
    records which model the campaign starts from."""
    import json

    from selfevolve.bootstrap import run_bootstrap
    from selfevolve.stages.common import EMBEDDED

    out = Path(root) / EMBEDDED
    if params.model.base != EMBEDDED:
        out.mkdir(parents=True, exist_ok=True)
        (out / "reference.json").write_text(json.dumps({"model": params.model.base, "backend": params.model.backend}, indent=2))
        return {"embedded": 0}
    pool = read_jsonl(cycle_paths("base", root).pool, Question)
    summary = run_bootstrap(params, out, seed_questions=pool)
    return {"embedded": 1, **{k: v for k, v in summary.items() if isinstance(v, (int, float)) and v is not None}}
