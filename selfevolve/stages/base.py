"""Stages before the first cycle: ``seeds`` (the seed set = pool of the base cycle, validation and
held-out questions) and ``bootstrap`` (the embedded tiny model)."""

from __future__ import annotations

import json

from selfevolve.questions.seed_sets import load_seed_set
from selfevolve.records import Question, read_jsonl, write_json, write_jsonl
from selfevolve.stages.context import EMBEDDED, StageContext, log


def seeds(ctx: StageContext) -> dict:
    """Write ``data/cycles/base/{pool,val,heldout}.jsonl`` from ``seeds.set``, and the base cycle's
    (empty) MASS champions, distilled runs and earlier distilled runs, so that every cycle reads
    those of the cycle it starts from."""
    pool, val, held = load_seed_set(ctx.params, ctx.root)
    write_jsonl(ctx.base.pool, pool)
    write_jsonl(ctx.base.val, val)
    write_jsonl(ctx.base.heldout, held)
    write_json(ctx.base.mass_champions, {})
    write_jsonl(ctx.base.mass_distill, [])
    write_jsonl(ctx.base.earlier_distilled, [])
    return {"seed_questions": len(pool), "val_questions": len(val), "heldout_questions": len(held)}


def bootstrap(ctx: StageContext) -> dict:
    """Build the embedded tiny model into ``models/base`` and write its transcripts as the base
    cycle's replay (``data/cycles/base/replay.jsonl``); then measure where it stands: greedy
    accuracy per validation split and the frontier's pass@k at ``sampling.temperature``
    (``bootstrap.frontier_k``): a frontier the model never solves, even by sampling, gives the cycles
    nothing to learn from. When ``model.base`` names another model (a hub id or local path from a
    preset), nothing is trained: ``models/base/reference.json`` records which model the campaign
    starts from, and the replay is the model's own right answers on the forms it masters
    (:func:`mastered_replay`; empty unless ``bootstrap.replay_questions``). A GGUF base (a file, an
    archive holding one, or a registry package: ``selfevolve.backends.gguf_model``) is converted
    into ``models/base`` first."""
    from selfevolve.backends.gguf_model import convert, is_gguf_source, locate
    from selfevolve.embedded.warm_start import run_bootstrap, split_role_check

    out = ctx.base.model
    params = ctx.params
    if is_gguf_source(params.model.base):
        info = convert(locate(params.model.base, ctx.root), out)
        (out / "reference.json").write_text(json.dumps({"model": params.model.base, "converted": "gguf", **info}, indent=2))
        rows, counts = mastered_replay(ctx)
        _no_labels_yet(ctx, replay=rows)
        numbers = {k: v for k, v in info.items() if isinstance(v, (int, float))}
        return {"embedded": 0, **numbers, **counts, **standing(ctx)}
    if params.model.base != EMBEDDED:
        out.mkdir(parents=True, exist_ok=True)
        (out / "reference.json").write_text(json.dumps({"model": params.model.base, "backend": params.model.backend}, indent=2))
        rows, counts = mastered_replay(ctx)
        _no_labels_yet(ctx, replay=rows)
        return {"embedded": 0, **counts, **standing(ctx)}
    summary, rows = run_bootstrap(params, out, seed_questions=read_jsonl(ctx.base.pool, Question), probe=frontier_probe(ctx),
                                  role_check=split_role_check(params))
    _no_labels_yet(ctx, replay=rows)
    numbers = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and v is not None}
    kept = next((r for r in summary.get("rounds", []) if r.get("kept")), None)
    return {"embedded": 1, "replay_rows": len(rows), **numbers, **standing(ctx, probed=kept)}


def mastered_replay(ctx: StageContext) -> tuple[list, dict]:
    """The replay of a pretrained base model: its own greedy Solver answers to the first
    ``bootstrap.replay_questions`` questions of the seed pool, graded by the verifiers; of the forms
    (``Question.form``) it answers right at least ``rl.mastered_accuracy`` of the time there (the
    retention guard's test, ``training.rl.retention_flags``), every right answer written in the
    Solver's format (``roles.parsers.well_formed_solver``) becomes a Solver row (source
    ``replay``), replayed at ``rl.replay_fraction`` of each training batch (and
    among ``sft.replay_fraction`` of the SFT chats). An answer the model gave only once asked for
    it (``roles.forcing``) counts, as in the self-labels.

    Why: a pretrained model has no warm-start transcripts, so nothing protected what it masters.
    Measured on SmolLM2-135M-Instruct (docs/measurements.md, "Retention of the easy form"): c2's
    expert iteration on 2-3-digit labels took validation 1+1 from 0.94 to 0.50 and the retention
    guard refused the cycle. Rehearsal of the model's own outputs on what it already does is the
    experience replay of continual learning (Rolnick et al. 2019, "Experience Replay for Continual
    Learning"); greedy answers, because they are what the guard measures.

    Returns ``(rows, counts)``: ``replay_questions_answered``, ``replay_forms_mastered``, ``replay_rows``.
    Empty rows and no counts when ``bootstrap.replay_questions`` is 0."""
    from selfevolve.evaluation.solve import SolveConfig, evaluate_questions
    from selfevolve.records import Rollout
    from selfevolve.roles.parsers import well_formed_solver
    from selfevolve.roles.templates import render
    from selfevolve.training.rl import form_accuracy, retention_flags

    n = ctx.params.bootstrap.replay_questions
    if not n:
        return [], {}
    questions = [q for q in read_jsonl(ctx.base.pool, Question) if q.form][:n]
    with ctx.backend(ctx.base_model()) as backend:
        answered, _ = evaluate_questions(backend, questions, SolveConfig.from_params(ctx.params), k=1, seed=ctx.seed("replay"))
    correct, forms = [r["correct"][0] for r in answered], [q.form for q in questions]
    flags = retention_flags(correct, forms, ctx.params.rl.mastered_accuracy)  # the guard's own "mastered"
    rows = [Rollout(id=f"base-replay-{q.id}", role="solver", group=q.id, question_id=q.id,
                    prompt=render("solver", question=q.text, domain=q.domain, plan=None), completion=r["completions"][0],
                    reward=1.0, detail={"source": "replay", "cycle": "base", "pass_rate": 1.0, "level": q.level, "form": q.form})
            for q, r, mastered in zip(questions, answered, flags)
            if mastered and r["correct"][0] and well_formed_solver(r["completions"][0])]
    accuracy = form_accuracy(correct, forms)
    mastered_forms = sorted({q.form for q, m in zip(questions, flags) if m})
    log.info("replay of the base model: %d right answers on the forms it masters (%s) of %d seed questions",
             len(rows), ", ".join(f"{f} {accuracy[f]:.2f}" for f in mastered_forms) or "none", len(questions))
    return rows, {"replay_questions_answered": len(questions), "replay_forms_mastered": len(mastered_forms), "replay_rows": len(rows)}


def _no_labels_yet(ctx: StageContext, replay: list) -> None:
    """The base cycle's replay (the warm start's transcripts, or :func:`mastered_replay`'s rows) and
    its self-labels and earlier labels, both empty: every cycle reads those of the cycle it starts from."""
    write_jsonl(ctx.base.replay, replay)
    write_jsonl(ctx.base.self_labels, [])
    write_jsonl(ctx.base.earlier_labels, [])


def _probe_splits(ctx: StageContext) -> dict[str, list[Question]]:
    """Up to ``bootstrap.probe_questions`` validation questions of each split."""
    from collections import defaultdict

    splits: dict[str, list[Question]] = defaultdict(list)
    for q in read_jsonl(ctx.base.val, Question):
        if len(splits[q.split or "all"]) < ctx.params.bootstrap.probe_questions:
            splits[q.split or "all"].append(q)
    return splits


def frontier_probe(ctx: StageContext):
    """``probe(model, tokenizer) -> {"frontier_pass", "seed_accuracy", "seed_forms"}`` of an in-memory
    model: pass@k on the frontier's probe questions (``bootstrap.frontier_k`` samples at
    ``sampling.temperature``) and greedy accuracy on the seed forms' (None without a seed split),
    overall and per form (``{form: accuracy}``), for the warm start's check of its own standing;
    None without a frontier split or with ``bootstrap.extra_rounds`` = 0."""
    from selfevolve.backends.hf import HFBackend
    from selfevolve.evaluation.metrics import metric_name
    from selfevolve.evaluation.solve import SolveConfig, evaluate_questions

    bp = ctx.params.bootstrap
    splits = _probe_splits(ctx)
    if not splits.get("frontier") or not bp.extra_rounds:
        return None

    config = SolveConfig.from_params(ctx.params)

    def probe(model, tokenizer) -> dict:
        backend = HFBackend.from_pretrained_objects(model, tokenizer)
        _, m = evaluate_questions(backend, splits["frontier"], config, k=bp.frontier_k, seed=ctx.seed("standing-frontier-k"))
        out = {"frontier_pass": float(m[f"pass_at_{bp.frontier_k}"] if bp.frontier_k > 1 else m["accuracy"]), "seed_accuracy": None}
        if splits.get("seed"):
            _, m = evaluate_questions(backend, splits["seed"], config, k=1, seed=ctx.seed("standing-seed"))
            out["seed_accuracy"] = float(m["accuracy"])
            out["seed_forms"] = {q.form: m[f"accuracy_form_{metric_name(q.form)}"] for q in splits["seed"] if q.form}
        return out

    return probe


def standing(ctx: StageContext, probed: dict | None = None) -> dict:
    """Greedy accuracy of the base model on up to ``bootstrap.probe_questions`` validation questions
    of each split (``bootstrap_<split>_accuracy``) and, on the frontier split, pass@k with
    ``bootstrap.frontier_k`` samples (``bootstrap_frontier_pass_at_<k>``). ``probed``: the warm
    start's kept round (``frontier_pass``, ``seed_accuracy``), measured by :func:`frontier_probe` on
    the same questions with the same seeds; those two numbers are taken from it, not measured again."""
    from selfevolve.evaluation.solve import SolveConfig, evaluate_questions

    bp, config = ctx.params.bootstrap, SolveConfig.from_params(ctx.params)
    splits = _probe_splits(ctx)
    pass_key = f"bootstrap_frontier_pass_at_{bp.frontier_k}"
    probed = probed or {}
    known = {pass_key: probed.get("frontier_pass") if bp.frontier_k > 1 else None,
             "bootstrap_seed_accuracy": probed.get("seed_accuracy")}
    out: dict[str, float] = {k: v for k, v in known.items() if v is not None}
    with ctx.backend(ctx.base_model()) as backend:
        for split, qs in sorted(splits.items()):
            if f"bootstrap_{split}_accuracy" not in out:
                _, m = evaluate_questions(backend, qs, config, k=1, seed=ctx.seed(f"standing-{split}"))
                out[f"bootstrap_{split}_accuracy"] = m["accuracy"]
            if split == "frontier" and bp.frontier_k > 1 and pass_key not in out:
                _, m = evaluate_questions(backend, qs, config, k=bp.frontier_k, seed=ctx.seed("standing-frontier-k"))
                out[pass_key] = m[f"pass_at_{bp.frontier_k}"]
    return out
