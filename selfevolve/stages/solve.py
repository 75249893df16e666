"""The plan-solve phase of a SAGE cycle: the solve set and the Planner's plans (``plan``), the
Solver's n samples (``solve``) and their verification by the external verifiers (``verify``)."""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from selfevolve.pool import frontier_weights, next_rung_questions, weighted_sample
from selfevolve.records import Attempt, ChallengerRollout, CriticScore, Plan, Question, Verdict, read_jsonl, write_jsonl
from selfevolve.roles import parsers
from selfevolve.roles.forcing import force_missing_answers
from selfevolve.roles.templates import render
from selfevolve.stages.context import StageContext
from selfevolve.stages.shards import sharded_rows


def plan(ctx: StageContext) -> dict:
    """Build the solve set (gated new questions + ``sage.pool_sample`` items of the previous pool,
    frontier questions ``sage.frontier_boost`` times likelier, + ``sage.next_rung_questions`` drawn by
    the environment one rung past the Solver's edge: ``pool.next_rung_questions``) and have the
    Planner write a plan for each. With ``sage.ablation.planner = false`` no plans are
    written. Writes ``solve_set.jsonl`` and ``plans.jsonl``."""
    P = ctx.paths
    accepted_ids = {s.question_id for s in read_jsonl(P.critic_questions, CriticScore) if s.passed}
    new = [r.question for r in read_jsonl(P.challenge, ChallengerRollout) if r.question is not None and r.question.id in accepted_ids]
    pool = read_jsonl(ctx.init.pool, Question)
    sage = ctx.params.sage
    sample = weighted_sample(ctx.rng("plan"), pool, frontier_weights(pool, sage.frontier_band, sage.frontier_boost), sage.pool_sample)
    beyond = next_rung_questions(ctx.rng("next-rung"), pool, sage.frontier_band, sage.next_rung_questions, f"{ctx.cycle}-next")
    solve_set = new + sample + beyond
    write_jsonl(P.solve_set, solve_set)
    plans: list[Plan] = []
    if ctx.params.sage.ablation.planner and solve_set:
        prompts = [render("planner", question=q.text) for q in solve_set]
        with ctx.backend() as backend:
            comps = backend.chat([ctx.chat("planner", p) for p in prompts], ctx.sampling("plan"))
        for q, p, c in zip(solve_set, prompts, comps):
            out = parsers.parse_plan(c[0].text)
            plans.append(Plan(id=f"{q.id}-plan", question_id=q.id, completion=c[0].text, steps=out.steps, text=out.text,
                              format_reward=out.format_reward, prompt=p))
    write_jsonl(P.plans, plans)
    return {
        "solve_set_size": len(solve_set),
        "solve_set_new_questions": len(new),
        "solve_set_next_rung_questions": len(beyond),
        "plans_written": len(plans),
        "planner_format_reward": fmean(p.format_reward for p in plans) if plans else 0.0,
    }


def solve(ctx: StageContext) -> dict:
    """Solver: ``sage.solver_samples`` completions per solve-set question, with the plan in the
    prompt iff its Critic score passed the plan gate. Writes ``attempts.jsonl``.

    The questions are generated in blocks of ``sage.rollout_block``, each with its own seed, so a
    shard (``--shard K/N``: a contiguous range of blocks) writes exactly the rows the unsharded run
    writes for those blocks, and ``--merge N`` joins the parts into the same bytes."""
    P = ctx.paths
    questions = read_jsonl(P.solve_set, Question)
    plans = {p.question_id: p for p in read_jsonl(P.plans, Plan)}
    plan_scores = {s.question_id: s for s in read_jsonl(P.critic_plans, CriticScore)}
    block = ctx.params.sage.rollout_block
    blocks = [questions[i:i + block] for i in range(0, len(questions), block)]

    def compute(units: range) -> list[Attempt]:
        if not units:
            return []
        with ctx.backend() as backend:
            return [a for b in units for a in _solve_block(ctx, backend, b, blocks[b], plans, plan_scores)]

    attempts = sharded_rows(P.attempts, Attempt, len(blocks), compute, ctx.shard, ctx.merge)
    by_q = defaultdict(list)
    for a in attempts:
        by_q[a.question_id].append(a)
    return {
        "attempts": len(attempts),
        "solver_format_reward": fmean(a.format_reward for a in attempts) if attempts else 0.0,
        "plans_shown_rate": sum(any(a.plan_id for a in g) for g in by_q.values()) / max(1, len(by_q)),
        "solver_mean_output_tokens": fmean(a.output_tokens for a in attempts) if attempts else 0.0,
        "solver_answered_rate": sum(a.answer is not None for a in attempts) / max(1, len(attempts)),
        "solver_forced_rate": sum(a.forced for a in attempts) / max(1, len(attempts)),
    }


def _solve_block(ctx: StageContext, backend, index: int, questions: list[Question], plans: dict, plan_scores: dict) -> list[Attempt]:
    """The Solver's attempts on one block of the solve set, sampled with the block's own seeds."""
    prompts, shown = [], []
    for q in questions:
        p, s = plans.get(q.id), plan_scores.get(q.id)
        show = p is not None and s is not None and s.passed and bool(p.text)
        shown.append(p.id if show else None)
        prompts.append(render("solver", question=q.text, domain=q.domain, plan=p.text if show else None))
    convs = [ctx.chat("solver", p, q.domain) for p, q in zip(prompts, questions)]
    comps = backend.chat(convs, ctx.sampling(f"solve/block{index}", n=ctx.params.sage.solver_samples))
    r_f = [[parsers.parse_solver(c.text, q.domain).format_reward for c in cs] for q, cs in zip(questions, comps)]
    forced = force_missing_answers(backend, questions, convs, comps, ctx.params.sampling.force_answer_tokens,
                                   ctx.seed(f"force-answers/block{index}"))
    attempts = []
    for q, prompt, plan_id, samples, fs, fl in zip(questions, prompts, shown, comps, r_f, forced):
        for j, c in enumerate(samples):
            out = parsers.parse_solver(c.text, q.domain)  # the format reward is the unforced text's
            attempts.append(Attempt(id=f"{q.id}-s{j}", question_id=q.id, sample=j, completion=c.text, answer=out.answer,
                                    plan_id=plan_id, format_reward=fs[j], prompt=prompt, output_tokens=c.output_tokens,
                                    forced=bool(fl[j])))
    return attempts


class VerifyInfraError(RuntimeError):
    """Too many verdicts of a verify run are infrastructure errors: the grading machine is failing."""


def verify(ctx: StageContext) -> dict:
    """External verifiers on every attempt (math grader / code sandbox). Writes ``verdicts.jsonl``;
    a shard (``--shard K/N``) grades a contiguous range of the attempts. Verdicts the verifier could
    not give (``Verdict.graded`` false) are counted apart (``verify_infra_errors``) and left out of
    the accuracies; above ``verifiers.max_infra_error_rate`` of them the stage raises
    ``VerifyInfraError`` instead of writing its metrics."""
    from selfevolve.verifiers.grading import verify_answers

    P = ctx.paths
    questions = {q.id: q for q in read_jsonl(P.solve_set, Question)}
    attempts = read_jsonl(P.attempts, Attempt)

    def compute(units: range) -> list[Verdict]:
        mine = [attempts[i] for i in units]
        return verify_answers([questions[a.question_id] for a in mine], [a.answer for a in mine], ctx.params.verifiers,
                              ids=[a.id for a in mine])

    verdicts = sharded_rows(P.verdicts, Verdict, len(attempts), compute, ctx.shard, ctx.merge)
    infra = sum(not v.graded for v in verdicts)
    limit = ctx.params.verifiers.max_infra_error_rate
    if verdicts and infra / len(verdicts) > limit:
        raise VerifyInfraError(f"{infra} of {len(verdicts)} verdicts are infrastructure errors (the sandbox's supervisor "
                               f"died twice), above verifiers.max_infra_error_rate = {limit:g}: the grading machine is "
                               f"failing (memory, killed processes); fix it and re-run the stage")
    graded = [v for v in verdicts if v.graded]
    per_q = defaultdict(list)
    for v in graded:
        per_q[v.question_id].append(v.correct)
    return {
        "verify_infra_errors": infra,
        "solver_accuracy": fmean(v.correct for v in graded) if graded else 0.0,
        "questions_with_a_correct_sample": sum(max(c) > 0 for c in per_q.values()) / max(1, len(per_q)),
        "groups_with_reward_spread": sum(0 < fmean(c) < 1 for c in per_q.values()) / max(1, len(per_q)),
    }
