"""The ``rewards`` stage: every SAGE reward as ``Rollout`` records, and the new question pool.

Rewards per role are the formulas of ``selfevolve.rewards`` (docs/design.md, "Rewards"): the
Challenger's ``r_c`` takes its difficulty ``r_d`` from the same n Solver samples that give the
Solver's ``r_s``; the Planner's ``r_p`` from the Critic's plan score; the Critic's ``r_cr`` is its
format reward. The pool of this cycle is the previous pool plus the gated, de-duplicated
Challenger questions whose spec stands (:func:`spec_holds`) and the questions the environment drew
one rung past the Solver's edge (``pool.next_rung_questions``), each carrying its measured Solver
pass rate.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from statistics import fmean, pstdev

from selfevolve import rewards as R
from selfevolve.pool import NEXT_RUNG_SOURCE, dedup_against, pool_stats
from selfevolve.records import (Attempt, ChallengerRollout, CriticScore, PassRate, Plan, Question, Rollout, Verdict, read_jsonl,
                                write_jsonl)
from selfevolve.stages.context import StageContext
from selfevolve.tracking import TRACE_ITEMS, Span

log = logging.getLogger("selfevolve")


def spec_holds(ch: ChallengerRollout, solver_correct: list[float]) -> bool:
    """Whether a Challenger question's verifier spec stands after solving: it validated, and a
    pseudo-label (a math answer the environment could not compute) agrees with the Solver's
    majority, i.e. more than half of the n samples were graded correct against it (R-Zero, Huang et
    al. 2025, majority-vote pseudo-labels)."""
    if ch.question is None or not ch.spec_valid:
        return False
    if ch.question.domain == "math" and ch.question.reference == "challenger":
        return bool(solver_correct) and fmean(solver_correct) > 0.5
    return True


def spec_is_right(ch: ChallengerRollout) -> bool:
    """Whether the verifier spec the Challenger wrote is right where the environment can tell: the
    answer it stated for a question the environment computed (``reference = "environment"``)
    is that value. The question itself stands on the environment's reference either way (it may
    join the pool), but a Challenger rollout that states a wrong sum earns no ``r_c`` and so is never
    imitated (on SmolLM2-135M nearly every stated sum was wrong, and imitating them taught its Solver
    to answer "<answer>N</answer>" without working: docs/measurements.md)."""
    if ch.question is None or ch.question.reference != "environment":
        return True
    return bool(ch.question.answer_agrees)


def rewards(ctx: StageContext) -> dict:
    """Every SAGE reward (``selfevolve.rewards``) as ``Rollout`` records, and the new question pool
    (previous pool + gated, de-duplicated Challenger questions and the solve set's questions drawn one
    rung past the edge, ``pool.next_rung_questions``, with Solver pass rates).
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
        right = valid.get(qid, False) and spec_is_right(ch)
        r = R.challenger_reward(s_q, ch.format_reward, right, correct.get(qid, []), sage, scored)
        out.append(Rollout(id=ch.id, role="challenger", group=ch.id, question_id=qid, prompt=ch.prompt, completion=ch.completion, reward=r,
                           detail={"s_q": s_q, "r_f": ch.format_reward, "spec_valid": right,
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
            by_id[qid].measured = PassRate(pass_rate=fmean(cs), samples=len(cs), cycle=cycle)
    gated = [ch.question for ch in challenges if ch.question and q_scores.get(ch.question.id) and q_scores[ch.question.id].passed
             and valid[ch.question.id]]
    solve_set = read_jsonl(P.solve_set, Question)
    gated += [q for q in solve_set if q.source == NEXT_RUNG_SOURCE]  # the environment's, no gate
    for q in gated:
        if q.id in correct:
            q.measured = PassRate(pass_rate=fmean(correct[q.id]), samples=len(correct[q.id]), cycle=cycle)
    kept, dups = dedup_against(pool, gated, n=sage.dedup_ngram, threshold=sage.dedup_threshold)
    new_pool = pool + kept
    write_jsonl(P.pool, new_pool)

    metrics: dict = {f"reward_{role}": fmean(r.reward for r in out if r.role == role)
                     for role in ("challenger", "planner", "solver", "critic") if any(r.role == role for r in out)}
    stats = pool_stats(new_pool)
    metrics.update(pool_size=stats["size"], pool_growth=len(kept), pool_duplicates_removed=len(dups),
                   pool_challenger_questions=stats["challenger_questions"],
                   pool_growth_next_rung=sum(q.source == NEXT_RUNG_SOURCE for q in kept),
                   challenger_valid_rate=sum(valid.values()) / max(1, len(challenges)),
                   pseudo_labels_rejected=sum(1 for ch in challenges if ch.question is not None and ch.spec_valid
                                              and not valid[ch.question.id]),
                   challenger_wrong_answers=sum(not spec_is_right(ch) for ch in challenges))
    new_levels = [q.level for q in kept if q.level is not None]
    if new_levels:
        metrics["pool_growth_mean_level"] = fmean(new_levels)
    if stats["mean_pass_rate"] is not None:
        metrics["pool_mean_pass_rate"] = stats["mean_pass_rate"]
    spreads = [pstdev(c) for c in correct.values() if len(c) > 1]
    metrics["solver_groups_with_spread"] = sum(s > 0 for s in spreads) / max(1, len(spreads))
    log.info("cycle %s: pool %d (+%d, %d duplicates dropped)", cycle, stats["size"], len(kept), len(dups))
    ctx.log_traces(sage_traces(solve_set, challenges, q_scores, plans, p_scores, attempts, verdicts,
                               correct, out, {q.id for q in new_pool}))
    return metrics


def _call(name: str, record, rollout: Rollout | None, **fields) -> Span:
    """A model call as an ``LLM`` span: its prompt in, its completion (and parsed ``fields``) out, its reward."""
    return Span(name, "LLM", inputs={"prompt": record.prompt}, outputs={"completion": record.completion, **fields},
                attributes={"reward": rollout.reward if rollout else None, **(rollout.detail if rollout else {})})


def _critic(name: str, score: CriticScore, by_id: dict[str, Rollout]) -> Span:
    return _call(name, score, by_id.get(f"{score.target_id}-critic"), score=score.score, passed=score.passed)


def sage_traces(solve_set: list[Question], challenges: list[ChallengerRollout], q_scores: dict[str, CriticScore],
                plans: dict[str, Plan], p_scores: dict[str, CriticScore], attempts: list[Attempt], verdicts: dict[str, Verdict],
                correct: dict[str, list[float]], rollouts: list[Rollout], pooled: set[str], n: int = TRACE_ITEMS) -> list[Span]:
    """One trace per solved question, for the first ``n`` of the solve set (the Challenger's new
    questions first, then the pool's): the question's round through the roles and the verifier.
    Spans: the Challenger's call (question and spec, r_c) and the Critic's score of the question
    (gate) for a Challenger question, the Planner's plan (r_p), the Critic's score of the plan, and
    each Solver sample (answer, r_s) with its verifier's verdict as a ``TOOL`` span. The root holds
    the question, its pass rate (``correct``: the graded outcomes per question id, as the rewards
    count them) and whether it is in the new pool."""
    by_id = {r.id: r for r in rollouts}
    written = {ch.question.id: ch for ch in challenges if ch.question is not None}
    tried = defaultdict(list)
    for a in attempts:
        tried[a.question_id].append(a)
    roots: list[Span] = []
    for q in sorted((q for q in solve_set if q.id in tried), key=lambda q: q.id not in written)[:n]:
        spans = []
        if q.id in written:
            ch = written[q.id]
            spans.append(_call("challenger", ch, by_id.get(ch.id), question=q.text, spec=q.spec.model_dump(mode="json")))
        if q.id in q_scores:
            spans.append(_critic("critic (question)", q_scores[q.id], by_id))
        if q.id in plans:
            spans.append(_call("planner", plans[q.id], by_id.get(plans[q.id].id), steps=plans[q.id].steps))
        if q.id in p_scores:
            spans.append(_critic("critic (plan)", p_scores[q.id], by_id))
        for a in tried[q.id]:
            v = verdicts.get(a.id)
            check = Span("verifier", "TOOL", inputs={"answer": a.answer, "code": a.code, "spec": q.spec.model_dump(mode="json")},
                         outputs=v.model_dump(mode="json") if v else None)
            solver = _call(f"solver (sample {a.sample})", a, by_id.get(a.id), answer=a.answer if a.code is None else a.code)
            solver.children.append(check)
            spans.append(solver)
        roots.append(Span(f"question {q.id}", "CHAIN", inputs={"question": q.text},
                          outputs={"pass_rate": fmean(correct[q.id]) if correct.get(q.id) else None, "in_pool": q.id in pooled},
                          attributes={"domain": q.domain, "level": q.level, "source": q.source, "reference": q.reference},
                          children=spans))
    return roots
