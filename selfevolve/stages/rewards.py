"""The ``rewards`` stage: every SAGE reward as ``Rollout`` records, and the new question pool.

Rewards per role are the formulas of ``selfevolve.rewards`` (docs/design.md, "Rewards"): the
Challenger's ``r_c`` takes its difficulty ``r_d`` from the same n Solver samples that give the
Solver's ``r_s``; the Planner's ``r_p`` from the Critic's plan score; the Critic's ``r_cr`` is its
format reward. The pool of this cycle is the previous pool plus the gated, de-duplicated
Challenger questions whose spec stands (:func:`spec_holds`), each carrying its measured Solver
pass rate.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from statistics import fmean, pstdev

from selfevolve import rewards as R
from selfevolve.pool import dedup_against, pool_stats
from selfevolve.records import Attempt, ChallengerRollout, CriticScore, Plan, Question, Rollout, Verdict, read_jsonl, write_jsonl
from selfevolve.stages.context import StageContext

log = logging.getLogger("selfevolve")


def spec_holds(ch: ChallengerRollout, solver_correct: list[float]) -> bool:
    """Whether a Challenger question's verifier spec stands after solving: it validated, and a
    pseudo-label (a math answer the environment could not compute) agrees with the Solver's
    majority, i.e. more than half of the n samples were graded correct against it (R-Zero, Huang et
    al. 2025, majority-vote pseudo-labels)."""
    if ch.question is None or not ch.spec_valid:
        return False
    if ch.question.domain == "math" and ch.question.meta.get("reference") == "challenger":
        return bool(solver_correct) and fmean(solver_correct) > 0.5
    return True


def rewards(ctx: StageContext) -> dict:
    """Every SAGE reward (``selfevolve.rewards``) as ``Rollout`` records, and the new question pool
    (previous pool + gated, de-duplicated Challenger questions, with Solver pass rates).
    Writes ``rollouts.jsonl`` and ``pool.jsonl``. An attempt whose verdict is an infrastructure
    error (``Verdict.graded`` false) gets no rollout and counts in no pass rate."""
    P, prev, cycle = ctx.paths, ctx.init, ctx.cycle
    sage = ctx.params.sage
    challenges = read_jsonl(P.challenge, ChallengerRollout)
    q_scores = {s.question_id: s for s in read_jsonl(P.critic_questions, CriticScore)}
    plans = {p.question_id: p for p in read_jsonl(P.plans, Plan)}
    p_scores = {s.question_id: s for s in read_jsonl(P.critic_plans, CriticScore)}
    attempts = read_jsonl(P.attempts, Attempt)
    verdicts = {v.attempt_id: v for v in read_jsonl(P.verdicts, Verdict)}
    correct = defaultdict(list)
    for a in attempts:  # a verdict the verifier could not give is no outcome: in no reward, no pass rate
        if verdicts[a.id].graded:
            correct[a.question_id].append(verdicts[a.id].correct)

    valid = {ch.question.id: spec_holds(ch, correct.get(ch.question.id, [])) for ch in challenges if ch.question is not None}
    out: list[Rollout] = []
    for ch in challenges:
        qid = ch.question.id if ch.question else ch.id
        s = q_scores.get(qid)
        s_q = s.score if s else 0.0
        scored = s is not None and (s.raw is not None or not sage.ablation.critic)
        r = R.challenger_reward(s_q, ch.format_reward, valid.get(qid, False), correct.get(qid, []), sage, scored)
        out.append(Rollout(id=ch.id, role="challenger", group=ch.id, question_id=qid, prompt=ch.prompt, completion=ch.completion, reward=r,
                           detail={"s_q": s_q, "r_f": ch.format_reward, "spec_valid": valid.get(qid, False),
                                   "r_d": R.difficulty(correct[qid], sage.difficulty_reward) if qid in correct else None}))
    if sage.ablation.critic:
        for s in list(q_scores.values()) + list(p_scores.values()):
            out.append(Rollout(id=f"{s.target_id}-critic", role="critic", group=f"{s.target_id}-critic", question_id=s.question_id,
                               prompt=s.prompt, completion=s.completion, reward=R.critic_reward(s.format_reward),
                               detail={"target": s.target, "raw": s.raw}))
    for qid, p in plans.items():
        s_p = p_scores[qid].score if qid in p_scores else 0.0
        out.append(Rollout(id=p.id, role="planner", group=p.id, question_id=qid, prompt=p.prompt, completion=p.completion,
                           reward=R.planner_reward(s_p, p.format_reward, sage), detail={"s_p": s_p, "r_f": p.format_reward}))
    for a in (a for a in attempts if verdicts[a.id].graded):
        s_p = p_scores[a.question_id].score if a.plan_id and a.question_id in p_scores else None
        s_gt = verdicts[a.id].correct
        out.append(Rollout(id=a.id, role="solver", group=f"{a.question_id}-solve", question_id=a.question_id, prompt=a.prompt,
                           completion=a.completion, reward=R.solver_reward(s_p, s_gt, a.format_reward, sage),
                           detail={"s_p": s_p, "s_gt": s_gt, "r_f": a.format_reward}))
    write_jsonl(P.rollouts, out)

    # question pool
    pool = read_jsonl(prev.pool, Question)
    by_id = {q.id: q for q in pool}
    for qid, cs in correct.items():
        if qid in by_id:
            by_id[qid].meta.update(pass_rate=fmean(cs), samples=len(cs), measured_in=cycle)
    gated = [ch.question for ch in challenges if ch.question and q_scores.get(ch.question.id) and q_scores[ch.question.id].passed
             and valid[ch.question.id]]
    for q in gated:
        if q.id in correct:
            q.meta.update(pass_rate=fmean(correct[q.id]), samples=len(correct[q.id]), measured_in=cycle)
    kept, dups = dedup_against(pool, gated, n=sage.dedup_ngram, threshold=sage.dedup_threshold)
    new_pool = pool + kept
    write_jsonl(P.pool, new_pool)

    metrics: dict = {f"reward_{role}": fmean(r.reward for r in out if r.role == role)
                     for role in ("challenger", "planner", "solver", "critic") if any(r.role == role for r in out)}
    stats = pool_stats(new_pool)
    metrics.update(pool_size=stats["size"], pool_growth=len(kept), pool_duplicates_removed=len(dups),
                   pool_challenger_questions=stats["challenger_questions"],
                   challenger_valid_rate=sum(valid.values()) / max(1, len(challenges)),
                   pseudo_labels_rejected=sum(1 for ch in challenges if ch.question is not None and ch.spec_valid
                                              and not valid[ch.question.id]))
    new_levels = [q.level for q in kept if q.level is not None]
    if new_levels:
        metrics["pool_growth_mean_level"] = fmean(new_levels)
    if stats["mean_pass_rate"] is not None:
        metrics["pool_mean_pass_rate"] = stats["mean_pass_rate"]
    spreads = [pstdev(c) for c in correct.values() if len(c) > 1]
    metrics["solver_groups_with_spread"] = sum(s > 0 for s in spreads) / max(1, len(spreads))
    log.info("cycle %s: pool %d (+%d, %d duplicates dropped)", cycle, stats["size"], len(kept), len(dups))
    return metrics
