"""Stages before the first cycle: ``seeds`` (the seed set = pool of the base cycle, validation and
held-out questions) and ``bootstrap`` (the embedded tiny model)."""

from __future__ import annotations

import json

from selfevolve.questions.seed_sets import load_seed_set
from selfevolve.records import Question, read_jsonl, write_json, write_jsonl
from selfevolve.stages.context import EMBEDDED, StageContext


def seeds(ctx: StageContext) -> dict:
    """Write ``data/cycles/base/{pool,val,heldout}.jsonl`` from ``seeds.set``, and the base cycle's
    (empty) MASS champions, so that every cycle reads the champions of the cycle it starts from."""
    pool, val, held = load_seed_set(ctx.params, ctx.root)
    write_jsonl(ctx.base.pool, pool)
    write_jsonl(ctx.base.val, val)
    write_jsonl(ctx.base.heldout, held)
    write_json(ctx.base.mass_champions, {})
    return {"seed_questions": len(pool), "val_questions": len(val), "heldout_questions": len(held)}


def bootstrap(ctx: StageContext) -> dict:
    """Build the embedded tiny model into ``models/base``. When ``model.base`` names another model
    (a hub id or local path from a preset), nothing is trained: ``models/base/reference.json``
    records which model the campaign starts from."""
    from selfevolve.embedded.warm_start import run_bootstrap

    out = ctx.base.model
    params = ctx.params
    if params.model.base != EMBEDDED:
        out.mkdir(parents=True, exist_ok=True)
        (out / "reference.json").write_text(json.dumps({"model": params.model.base, "backend": params.model.backend}, indent=2))
        return {"embedded": 0}
    summary = run_bootstrap(params, out, seed_questions=read_jsonl(ctx.base.pool, Question))
    return {"embedded": 1, **{k: v for k, v in summary.items() if isinstance(v, (int, float)) and v is not None}}
