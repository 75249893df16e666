"""The ``evaluate`` stage (and ``evaluate_base``): a cycle's model on the benchmarks of
``evaluation.benchmarks``, and its MASS champion against the single agent."""

from __future__ import annotations

import json
import shutil
from itertools import zip_longest

from selfevolve.evaluation.evaluate import evaluate_benchmarks
from selfevolve.evaluation.solve import SolveConfig
from selfevolve.records import Question, read_jsonl, write_json, write_jsonl
from selfevolve.stages.context import StageContext
from selfevolve.verifiers.grading import verify_fn


def evaluate(ctx: StageContext) -> dict:
    """Benchmarks of ``evaluation.benchmarks`` (default: the held-out set) on ``models/<cycle>``
    (the campaign's base model for ``base``): greedy pass@1 for k = 1, sampled pass@k for k > 1,
    graded by the verifiers (``selfevolve.evaluation.evaluate.evaluate_benchmarks``).
    Writes ``eval/<benchmark>.jsonl`` (per question) and returns ``<benchmark>_<metric>`` metrics
    (always ``heldout_accuracy`` and ``heldout_n`` when ``heldout`` is listed). For a cycle with a
    MASS champion, also the MASS benchmark (:func:`mass_benchmark`: ``eval/mass.json``, ``mass_*``)."""
    P, params = ctx.paths, ctx.params
    if P.eval_dir.exists():  # the stage owns eval/: no stale files of benchmarks no longer listed
        shutil.rmtree(P.eval_dir)
    heldout = read_jsonl(ctx.base.heldout, Question)
    with ctx.backend(ctx.model()) as backend:
        results, metrics = evaluate_benchmarks(backend, params.evaluation.benchmarks, SolveConfig.from_params(params), heldout=heldout,
                                               data_dir=ctx.data_dir, seed=ctx.seed("evaluate"))
        for key, rows in results.items():
            write_jsonl(P.eval_file(key), rows)
        if ctx.cycle != "base" and params.mass.enabled and params.evaluation.mass_questions and P.mass_champions.exists():
            metrics |= mass_benchmark(ctx, backend, heldout)
    P.eval_dir.mkdir(parents=True, exist_ok=True)
    if "heldout" in results:
        base_rows = prev_rows = None
        if ctx.cycle != "base":
            base_rows = _rows_of(ctx.base.eval_file("heldout"))
            prev_rows = base_rows if ctx.init_cycle == "base" else _rows_of(ctx.init.eval_file("heldout"))
        metrics |= split_metrics(results["heldout"], base_rows, prev_rows)
    return metrics


def _rows_of(path) -> list[dict] | None:
    return read_rows(path) if path.exists() else None


def read_rows(path) -> list[dict]:
    """Per-question evaluation rows (``eval/<benchmark>.jsonl``)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def split_metrics(rows: list[dict], base_rows: list[dict] | None, prev_rows: list[dict] | None = None) -> dict:
    """``heldout_<split>_accuracy`` and ``heldout_<split>_n`` for each held-out split (the arith
    ladder's ``seed`` levels, retention; ``frontier`` and ``beyond`` levels, never supervised), and
    for ``rungs``, all unsupervised splits together (every split but ``seed``; when there are two
    or more). Against the base model's rows on the same questions (``base_rows``)
    ``heldout_<group>_p_vs_base`` (exact McNemar, two-sided) and ``heldout_<group>_gain_vs_base``
    (a fraction of the questions, in [-1, 1]); against the rows of the model the cycle started from
    (``prev_rows``: the previous cycle's, the base model's for the first) ``_p_vs_prev`` and
    ``_gain_vs_prev``: whether each cycle moved its rungs beyond the last one, not only beyond the
    base. Rows without a split are ignored.
    For arith rows (``categories.form``) also ``heldout_reach_50`` / ``heldout_reach_90``: the
    largest operand-digit total of an unsupervised form (splits other than ``seed``) answered at
    least 50 % / 90 % right (``selfevolve.questions.arith.reach``; 0 when none is). Seed forms do
    not count: the footholds (5+2 digits) would set reach 7 before any cycle. And ``heldout_holes``:
    how many forms, seed forms included, the model fails while it solves a harder one
    (``selfevolve.questions.arith.ladder_holes``; the report names them)."""
    from selfevolve.questions.arith import ladder_holes, parse_form, reach
    from selfevolve.stats import mcnemar_exact

    by_split: dict[str, dict[str, int]] = {}
    for r in rows:
        split = (r.get("categories") or {}).get("split")
        if split:
            by_split.setdefault(split, {})[str(r["id"])] = int(r["correct"][0])
    unsupervised = [s for s in by_split if s != "seed"]
    if len(unsupervised) > 1:
        by_split["rungs"] = {i: c for s in unsupervised for i, c in by_split[s].items()}
    refs = {name: {str(r["id"]): int(r["correct"][0]) for r in ref} for name, ref in (("base", base_rows), ("prev", prev_rows))
            if ref is not None}
    out: dict[str, float] = {}
    forms: dict[str, list[int]] = {}
    seed_forms: set[str] = set()
    for r in rows:
        cats = r.get("categories") or {}
        try:
            parse_form(cats.get("form"))
        except ValueError:
            continue
        forms.setdefault(cats["form"], []).append(int(r["correct"][0]))
        if cats.get("split") == "seed":
            seed_forms.add(cats["form"])
    if forms:  # rows of the arith ladder (a parseable form)
        accuracy = {f: sum(c) / len(c) for f, c in forms.items()}
        unsupervised = {f: a for f, a in accuracy.items() if f not in seed_forms}
        out["heldout_reach_50"], out["heldout_reach_90"] = reach(unsupervised, 0.5), reach(unsupervised, 0.9)
        out["heldout_holes"] = len(ladder_holes(accuracy))
    for split, outcome in sorted(by_split.items()):
        out[f"heldout_{split}_accuracy"] = sum(outcome.values()) / len(outcome)
        out[f"heldout_{split}_n"] = len(outcome)
        for name, ref in refs.items():
            ids = [i for i in outcome if i in ref]
            if ids:
                p, _, _ = mcnemar_exact([ref[i] for i in ids], [outcome[i] for i in ids])
                out[f"heldout_{split}_p_vs_{name}"] = p
                out[f"heldout_{split}_gain_vs_{name}"] = (sum(outcome[i] for i in ids) - sum(ref[i] for i in ids)) / len(ids)
    return out


def mass_benchmark(ctx: StageContext, backend, heldout: list[Question]) -> dict:
    """The cycle's MASS champion vs the single agent on ``evaluation.mass_questions`` held-out
    questions, those of the unsupervised splits (frontier, rungs beyond; in turn, so both are
    there) first: on the seed forms both are right nearly always and the comparison could tell
    nothing apart. Runs with the cycle's model (``selfevolve.mass.benchmark``); writes
    ``eval/mass.json`` and returns its ``mass_*`` metrics."""
    from selfevolve.mass.benchmark import champion_vs_single_agent
    from selfevolve.mass.design import load_champions

    params = ctx.params
    champions = load_champions(ctx.paths.mass_champions)
    by_split: dict[str, list[Question]] = {}
    for q in heldout:
        if q.split not in (None, "seed"):
            by_split.setdefault(q.split, []).append(q)
    moving = [q for group in zip_longest(*by_split.values()) for q in group if q is not None]  # the splits in turn
    rest = [q for q in heldout if q.split in (None, "seed")]
    questions = (moving + rest)[: params.evaluation.mass_questions]
    rows, metrics = champion_vs_single_agent(backend, champions, questions, params.mass,
                                             verify_fn(params.verifiers), max_model_len=params.model.max_model_len,
                                             max_new_tokens=params.evaluation.max_new_tokens, seed=ctx.seed("evaluate-mass"))
    write_json(ctx.paths.mass_eval, rows)
    return metrics
