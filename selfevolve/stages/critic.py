"""The Critic's stages: scores of the Challenger's questions (quality gate) and of the Planner's
plans (plan gate), each a 1-10 judgement normalised to [0, 1]."""

from __future__ import annotations

from statistics import fmean

from selfevolve import rewards as R
from selfevolve.records import ChallengerRollout, CriticScore, Plan, Question, read_jsonl, write_jsonl
from selfevolve.roles import parsers
from selfevolve.roles.templates import render
from selfevolve.stages.context import StageContext


def score_all(ctx: StageContext, role: str, items: list[dict], purpose: str, enabled: bool
              ) -> list[tuple[str, str, parsers.ScoreOutput, bool]]:
    """``(prompt, completion, parsed score, scored)`` per item from the Critic prompt ``role``.
    ``scored`` is whether the item has a usable score: with the Critic ablated (``enabled`` false)
    every item scores 1 without a prompt (scored); an item with an empty field (a plan that parsed
    to nothing) is not shown to the Critic (not scored); otherwise scored iff the completion held a
    score in [0, 10]. No gate passes an item that is not scored."""
    if not enabled:
        return [("", "", parsers.ScoreOutput(None, 1.0, 0.0), True) for _ in items]
    unparsed = ctx.params.sage.critic_unparseable_score
    shown = [i for i, it in enumerate(items) if all(str(v).strip() for v in it.values())]
    out = [("", "", parsers.ScoreOutput(None, unparsed, 0.0), False) for _ in items]
    if not shown:
        return out
    prompts = [render(role, **items[i]) for i in shown]
    with ctx.backend() as backend:
        comps = backend.chat([ctx.chat(role, p) for p in prompts], ctx.sampling(purpose))
    for i, p, c in zip(shown, prompts, comps):
        s = parsers.parse_score(c[0].text, unparsed)
        out[i] = (p, c[0].text, s, s.raw is not None)
    return out


def critic_questions(ctx: StageContext) -> dict:
    """Critic on every parsed Challenger question: s_q, and the quality gate (s_q >= alpha and a
    valid spec). With ``sage.ablation.critic = false`` no Critic runs: s_q = 1 for every question
    (nothing is filtered but invalid specs). Writes ``critic_questions.jsonl``."""
    sage = ctx.params.sage
    rollouts = [r for r in read_jsonl(ctx.paths.challenge, ChallengerRollout) if r.question is not None]
    outs = score_all(ctx, "critic_question", [{"question": r.question.text} for r in rollouts], "critic_questions",
                     sage.ablation.critic)
    scores = [CriticScore(target="question", target_id=r.question.id, question_id=r.question.id, prompt=prompt, completion=text,
                          raw=s.raw, score=s.score, format_reward=s.format_reward,
                          passed=scored and R.question_passes_gate(s.score, r.spec_valid, sage))
              for r, (prompt, text, s, scored) in zip(rollouts, outs)]
    write_jsonl(ctx.paths.critic_questions, scores)
    n = max(1, len(scores))
    return {
        "critic_question_pass_rate": sum(s.passed for s in scores) / n,
        "critic_question_mean_score": fmean(s.score for s in scores) if scores else 0.0,
        "critic_question_format_reward": fmean(s.format_reward for s in scores) if scores else 0.0,
        "critic_question_parsed_rate": sum(s.raw is not None for s in scores) / n if sage.ablation.critic else 0.0,
        "questions_scored": len(scores),
        "questions_accepted": sum(s.passed for s in scores),
    }


def critic_plans(ctx: StageContext) -> dict:
    """Critic on every plan: s_p (plan gate s_p >= beta decides whether the Solver sees it). With
    ``sage.ablation.critic = false`` every plan gets s_p = 1. Writes ``critic_plans.jsonl``."""
    questions = {q.id: q for q in read_jsonl(ctx.paths.solve_set, Question)}
    plans = read_jsonl(ctx.paths.plans, Plan)
    outs = score_all(ctx, "critic_plan", [{"question": questions[p.question_id].text, "plan": p.text or ""} for p in plans],
                     "critic_plans", ctx.params.sage.ablation.critic)
    scores = [CriticScore(target="plan", target_id=p.id, question_id=p.question_id, prompt=prompt, completion=text, raw=s.raw,
                          score=s.score, format_reward=s.format_reward,
                          passed=scored and R.plan_shown(s.score, ctx.params.sage))
              for p, (prompt, text, s, scored) in zip(plans, outs)]
    write_jsonl(ctx.paths.critic_plans, scores)
    n = max(1, len(scores))
    return {
        "critic_plan_pass_rate": sum(s.passed for s in scores) / n if scores else 0.0,
        "critic_plan_mean_score": fmean(s.score for s in scores) if scores else 0.0,
        "critic_plan_parsed_rate": sum(s.raw is not None for s in scores) / n if ctx.params.sage.ablation.critic else 0.0,
        "plans_scored": sum(bool(s.prompt) for s in scores),
    }
