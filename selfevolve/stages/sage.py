"""SAGE stages of one cycle (DESIGN.md 'Reward formulas'; SAGE paper, two phases per iteration).

Each function reads the files of earlier stages and writes its own, atomically, and returns a
metrics dict (which the CLI writes to ``metrics/<cycle>/<stage>.json`` and logs to MLflow).

Phases as implemented (one pass per cycle, all roles updated together afterwards):

* challenge phase: ``challenge`` (Challenger writes questions + verifier specs from pool items;
  specs validated by the verifiers) -> ``critic_questions`` (s_q, quality gate)
* plan-solve phase: ``plan`` (solve set = gated new questions + a pool sample; Planner writes plans)
  -> ``critic_plans`` (s_p, plan gate) -> ``solve`` (n samples, plan shown iff s_p >= beta) ->
  ``verify`` (s_gt from verifiers) -> ``rewards`` (r_c with r_d from the same samples, r_p, r_s,
  r_cr; question pool update).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean, pstdev

from selfevolve import rewards as R
from selfevolve.config import Params
from selfevolve.paths import cycle_paths
from selfevolve.pool import dedup_against, pool_stats
from selfevolve.records import (
    Attempt, ChallengerRollout, CodeSpec, CriticScore, MathSpec, Plan, Question, Rollout, Verdict,
    read_jsonl, write_jsonl,
)
from selfevolve.roles import parsers
from selfevolve.roles.templates import render
from selfevolve.seeds import arith
from selfevolve.stages.common import init_model_dir, init_paths, log, make_backend, sampling, stage_rng, stage_seed


def reference_text(q: Question) -> str:
    """How a reference item is shown to the Challenger: the question, and its answer for math."""
    return f"{q.text} Answer: {q.spec.answer}" if isinstance(q.spec, MathSpec) else q.text


def _entry_point(code: str | None) -> str | None:
    import ast

    try:
        tree = ast.parse(code or "")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    return names[-1] if names else None


def challenger_question(out: parsers.ChallengerOutput, qid: str, parent: Question, cycle_index: int) -> Question | None:
    """Turn a parsed Challenger completion into a ``Question`` (None when a required part is missing)."""
    if not out.ok or not out.question:
        return None
    if parent.domain == "code":
        spec = CodeSpec(tests=out.tests, reference_solution=out.reference_solution, entry_point=_entry_point(out.reference_solution))
        level = None
    else:
        spec = MathSpec(answer=out.answer or "")
        expr = arith.parse_expression(out.question)
        level = arith.level_of(*expr) if expr else None
    return Question(id=qid, domain=parent.domain, text=out.question, spec=spec, level=level, source="challenger",
                    parent_id=parent.id, cycle=cycle_index)


def challenge(params: Params, cycle: str, root=".") -> dict:
    """Challenger: ``questions_per_cycle`` new questions, each from a reference item drawn from the
    previous pool; verifier specs validated (``selfevolve.verifiers.spec``). Writes ``challenge.jsonl``."""
    from selfevolve.verifiers.spec import validate_specs_batch

    P, prev = cycle_paths(cycle, root), init_paths(params, cycle, root)
    pool = read_jsonl(prev.pool, Question)
    if not pool:
        raise ValueError(f"{prev.pool} is empty: the Challenger needs reference items")
    rng = stage_rng(params, cycle, "challenge")
    refs = [rng.choice(pool) for _ in range(params.sage.questions_per_cycle)]
    prompts = [render("challenger", domain=r.domain, reference=reference_text(r)) for r in refs]
    with make_backend(params, init_model_dir(params, cycle, root)) as backend:
        comps = backend.chat([[{"role": "user", "content": p}] for p in prompts], sampling(params, stage_seed(params, cycle, "challenge")))
    idx = params.cycle_index(cycle)
    rollouts, questions = [], []
    for i, (ref, prompt, c) in enumerate(zip(refs, prompts, comps)):
        text = c[0].text
        parsed = parsers.parse_challenger(text, ref.domain)
        q = challenger_question(parsed, f"{cycle}-q{i:04d}", ref, idx)
        rollouts.append(ChallengerRollout(id=f"{cycle}-ch{i:04d}", parent_id=ref.id, domain=ref.domain, prompt=prompt, completion=text,
                                          question=q, format_reward=parsed.format_reward,
                                          spec_reason=parsed.error or ""))
        if q is not None:
            questions.append((len(rollouts) - 1, q))
    checks = validate_specs_batch([q for _, q in questions], banned_modules=params.verifiers.banned_modules,
                                  timeout_s=params.verifiers.code_timeout_s)
    for (i, _), chk in zip(questions, checks):
        rollouts[i].spec_valid, rollouts[i].spec_reason = chk.valid, chk.reason
    write_jsonl(P.challenge, rollouts)
    n = len(rollouts)
    return {
        "challenger_rollouts": n,
        "challenger_parsed_rate": len(questions) / n,
        "challenger_spec_valid_rate": sum(r.spec_valid for r in rollouts) / n,
        "challenger_format_reward": fmean(r.format_reward for r in rollouts),
    }


def _score_all(params: Params, cycle: str, root, role: str, items: list[dict], stage: str) -> list[parsers.ScoreOutput]:
    if not items:
        return []
    prompts = [render(role, **it) for it in items]
    with make_backend(params, init_model_dir(params, cycle, root)) as backend:
        comps = backend.chat([[{"role": "user", "content": p}] for p in prompts], sampling(params, stage_seed(params, cycle, stage)))
    return [(p, c[0].text, parsers.parse_score(c[0].text, params.sage.critic_unparseable_score)) for p, c in zip(prompts, comps)]


def critic_questions(params: Params, cycle: str, root=".") -> dict:
    """Critic on every parsed Challenger question: s_q, and the quality gate (s_q >= alpha and a
    valid spec). With ``sage.ablation.critic = false`` no Critic runs: s_q = 1 for every question
    (nothing is filtered but invalid specs). Writes ``critic_questions.jsonl``."""
    P = cycle_paths(cycle, root)
    rollouts = [r for r in read_jsonl(P.challenge, ChallengerRollout) if r.question is not None]
    sage = params.sage
    scores: list[CriticScore] = []
    if sage.ablation.critic:
        outs = _score_all(params, cycle, root, "critic_question", [{"question": r.question.text} for r in rollouts], "critic_questions")
    else:
        outs = [("", "", parsers.ScoreOutput(None, 1.0, 0.0)) for _ in rollouts]
    for r, (prompt, text, s) in zip(rollouts, outs):
        scores.append(CriticScore(target="question", target_id=r.question.id, question_id=r.question.id, prompt=prompt, completion=text, raw=s.raw,
                                  score=s.score, format_reward=s.format_reward,
                                  passed=R.question_passes_gate(s.score, r.spec_valid, sage)))
    write_jsonl(P.critic_questions, scores)
    n = max(1, len(scores))
    return {
        "critic_question_pass_rate": sum(s.passed for s in scores) / n,
        "critic_question_mean_score": fmean(s.score for s in scores) if scores else 0.0,
        "critic_question_format_reward": fmean(s.format_reward for s in scores) if scores else 0.0,
        "questions_scored": len(scores),
        "questions_accepted": sum(s.passed for s in scores),
    }


def plan(params: Params, cycle: str, root=".") -> dict:
    """Build the solve set (gated new questions + ``pool_sample`` items of the previous pool) and
    have the Planner write a plan for each. With ``sage.ablation.planner = false`` no plans are
    written. Writes ``solve_set.jsonl`` and ``plans.jsonl``."""
    P, prev = cycle_paths(cycle, root), init_paths(params, cycle, root)
    accepted_ids = {s.question_id for s in read_jsonl(P.critic_questions, CriticScore) if s.passed}
    new = [r.question for r in read_jsonl(P.challenge, ChallengerRollout) if r.question is not None and r.question.id in accepted_ids]
    pool = read_jsonl(prev.pool, Question)
    rng = stage_rng(params, cycle, "plan")
    sample = rng.sample(pool, min(params.sage.pool_sample, len(pool)))
    solve_set = new + sample
    write_jsonl(P.solve_set, solve_set)
    plans: list[Plan] = []
    if params.sage.ablation.planner and solve_set:
        prompts = [render("planner", question=q.text) for q in solve_set]
        with make_backend(params, init_model_dir(params, cycle, root)) as backend:
            comps = backend.chat([[{"role": "user", "content": p}] for p in prompts], sampling(params, stage_seed(params, cycle, "plan")))
        for i, (q, p, c) in enumerate(zip(solve_set, prompts, comps)):
            out = parsers.parse_plan(c[0].text)
            plans.append(Plan(id=f"{q.id}-plan", question_id=q.id, completion=c[0].text, steps=out.steps, text=out.text,
                              format_reward=out.format_reward, prompt=p))
    write_jsonl(P.plans, plans)
    return {
        "solve_set_size": len(solve_set),
        "solve_set_new_questions": len(new),
        "plans_written": len(plans),
        "planner_format_reward": fmean(p.format_reward for p in plans) if plans else 0.0,
    }


def critic_plans(params: Params, cycle: str, root=".") -> dict:
    """Critic on every plan: s_p (plan gate s_p >= beta decides whether the Solver sees it). With
    ``sage.ablation.critic = false`` every plan gets s_p = 1. Writes ``critic_plans.jsonl``."""
    P = cycle_paths(cycle, root)
    questions = {q.id: q for q in read_jsonl(P.solve_set, Question)}
    plans = read_jsonl(P.plans, Plan)
    if params.sage.ablation.critic:
        outs = _score_all(params, cycle, root, "critic_plan",
                          [{"question": questions[p.question_id].text, "plan": p.text or ""} for p in plans], "critic_plans")
    else:
        outs = [("", "", parsers.ScoreOutput(None, 1.0, 0.0)) for _ in plans]
    scores = [CriticScore(target="plan", target_id=p.id, question_id=p.question_id, prompt=prompt, completion=text, raw=s.raw,
                          score=s.score, format_reward=s.format_reward, passed=R.plan_shown(s.score, params.sage))
              for p, (prompt, text, s) in zip(plans, outs)]
    write_jsonl(P.critic_plans, scores)
    n = max(1, len(scores))
    return {
        "critic_plan_pass_rate": sum(s.passed for s in scores) / n if scores else 0.0,
        "critic_plan_mean_score": fmean(s.score for s in scores) if scores else 0.0,
        "plans_scored": len(scores),
    }


def solve(params: Params, cycle: str, root=".") -> dict:
    """Solver: ``solver_samples`` completions per solve-set question, with the plan in the prompt
    iff its Critic score passed the plan gate. Writes ``attempts.jsonl``."""
    P = cycle_paths(cycle, root)
    questions = read_jsonl(P.solve_set, Question)
    plans = {p.question_id: p for p in read_jsonl(P.plans, Plan)}
    plan_scores = {s.question_id: s for s in read_jsonl(P.critic_plans, CriticScore)}
    prompts, shown = [], []
    for q in questions:
        p, s = plans.get(q.id), plan_scores.get(q.id)
        show = p is not None and s is not None and s.passed and bool(p.text)
        shown.append(p.id if show else None)
        prompts.append(render("solver", question=q.text, domain=q.domain, plan=p.text if show else None))
    n = params.sage.solver_samples
    attempts: list[Attempt] = []
    if questions:
        with make_backend(params, init_model_dir(params, cycle, root)) as backend:
            comps = backend.chat([[{"role": "user", "content": p}] for p in prompts], sampling(params, stage_seed(params, cycle, "solve"), n=n))
        for q, prompt, plan_id, samples in zip(questions, prompts, shown, comps):
            for j, c in enumerate(samples):
                out = parsers.parse_solver(c.text, q.domain)
                attempts.append(Attempt(id=f"{q.id}-s{j}", question_id=q.id, sample=j, completion=c.text, answer=out.answer,
                                        plan_id=plan_id, format_reward=out.format_reward, prompt=prompt, output_tokens=c.output_tokens))
    write_jsonl(P.attempts, attempts)
    return {
        "attempts": len(attempts),
        "solver_format_reward": fmean(a.format_reward for a in attempts) if attempts else 0.0,
        "plans_shown_rate": sum(p is not None for p in shown) / max(1, len(shown)),
        "solver_mean_output_tokens": fmean(a.output_tokens for a in attempts) if attempts else 0.0,
    }


def verify(params: Params, cycle: str, root=".") -> dict:
    """External verifiers on every attempt (math grader / code sandbox). Writes ``verdicts.jsonl``."""
    from selfevolve.stages.common import verify_answers

    P = cycle_paths(cycle, root)
    questions = {q.id: q for q in read_jsonl(P.solve_set, Question)}
    attempts = read_jsonl(P.attempts, Attempt)
    verdicts = verify_answers([questions[a.question_id] for a in attempts], [a.answer for a in attempts], params,
                              ids=[a.id for a in attempts])
    write_jsonl(P.verdicts, verdicts)
    per_q = defaultdict(list)
    for v in verdicts:
        per_q[v.question_id].append(v.correct)
    return {
        "solver_accuracy": fmean(v.correct for v in verdicts) if verdicts else 0.0,
        "questions_with_a_correct_sample": sum(max(c) > 0 for c in per_q.values()) / max(1, len(per_q)),
        "groups_with_reward_spread": sum(0 < fmean(c) < 1 for c in per_q.values()) / max(1, len(per_q)),
    }


def rewards(params: Params, cycle: str, root=".") -> dict:
    """Every SAGE reward (``selfevolve.rewards``) as ``Rollout`` records, and the new question pool
    (previous pool + gated, de-duplicated Challenger questions, with Solver pass rates).
    Writes ``rollouts.jsonl`` and ``pool.jsonl``."""
    P, prev = cycle_paths(cycle, root), init_paths(params, cycle, root)
    sage = params.sage
    challenges = read_jsonl(P.challenge, ChallengerRollout)
    q_scores = {s.question_id: s for s in read_jsonl(P.critic_questions, CriticScore)}
    plans = {p.question_id: p for p in read_jsonl(P.plans, Plan)}
    p_scores = {s.question_id: s for s in read_jsonl(P.critic_plans, CriticScore)}
    attempts = read_jsonl(P.attempts, Attempt)
    verdicts = {v.attempt_id: v for v in read_jsonl(P.verdicts, Verdict)}
    correct = defaultdict(list)
    for a in attempts:
        correct[a.question_id].append(verdicts[a.id].correct)

    out: list[Rollout] = []
    for ch in challenges:
        qid = ch.question.id if ch.question else ch.id
        s = q_scores.get(qid)
        s_q = s.score if s else 0.0
        r = R.challenger_reward(s_q, ch.format_reward, ch.spec_valid, correct.get(qid, []), sage)
        out.append(Rollout(id=ch.id, role="challenger", group=ch.id, question_id=qid, prompt=ch.prompt, completion=ch.completion, reward=r,
                           detail={"s_q": s_q, "r_f": ch.format_reward, "spec_valid": ch.spec_valid,
                                   "r_d": R.difficulty(correct[qid]) if qid in correct else None}))
    if sage.ablation.critic:
        for s in list(q_scores.values()) + list(p_scores.values()):
            out.append(Rollout(id=f"{s.target_id}-critic", role="critic", group=f"{s.target_id}-critic", question_id=s.question_id,
                               prompt=s.prompt, completion=s.completion, reward=R.critic_reward(s.format_reward),
                               detail={"target": s.target, "raw": s.raw}))
    for qid, p in plans.items():
        s_p = p_scores[qid].score if qid in p_scores else 0.0
        out.append(Rollout(id=p.id, role="planner", group=p.id, question_id=qid, prompt=p.prompt, completion=p.completion,
                           reward=R.planner_reward(s_p, p.format_reward, sage), detail={"s_p": s_p, "r_f": p.format_reward}))
    for a in attempts:
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
    gated = [ch.question for ch in challenges if ch.question and q_scores.get(ch.question.id) and q_scores[ch.question.id].passed]
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
                   pool_challenger_questions=stats["challenger_questions"])
    if stats["mean_pass_rate"] is not None:
        metrics["pool_mean_pass_rate"] = stats["mean_pass_rate"]
    spreads = [pstdev(c) for c in correct.values() if len(c) > 1]
    metrics["solver_groups_with_spread"] = sum(s > 0 for s in spreads) / max(1, len(spreads))
    log.info("cycle %s: pool %d (+%d, %d duplicates dropped)", cycle, stats["size"], len(kept), len(dups))
    return metrics
