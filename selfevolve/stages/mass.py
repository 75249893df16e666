"""The ``mass_search`` stage: MASS workflow search on the cycle's pool, then trajectories of the
champion for SFT (``selfevolve.mass.search.search_and_collect``) and its verified runs on the ladder
forms where it beats one pass, as the Solver's replies (``selfevolve.mass.distill``)."""

from __future__ import annotations

import json

from selfevolve.mass.design import DesignLimits
from selfevolve.mass.distill import distill, empty_report, ladder_forms
from selfevolve.mass.search import search_and_collect
from selfevolve.questions.seed_sets import arith_forms
from selfevolve.pool import where_designs_differ
from selfevolve.records import Question, Trajectory, read_jsonl, write_json, write_jsonl
from selfevolve.stages.context import StageContext
from selfevolve.tracking import TRACE_ITEMS, Span
from selfevolve.verifiers.grading import verify_fn


def mass_search(ctx: StageContext) -> dict:
    """MASS workflow search on ``mass.questions`` questions of the cycle's pool, where designs
    differ first (``selfevolve.pool.where_designs_differ``), then trajectories of the champion on them.

    Writes ``mass/search.json`` (champion per domain, every design's fitness, history per
    generation), ``mass/champions.json`` (the next cycle's seed champions),
    ``mass/trajectories.jsonl`` (kept champion runs) and ``mass/distill.jsonl`` (Solver rows from
    ``mass.distill_questions`` ladder questions: the math team's verified runs on the forms where
    it beats one pass, one pass's own on the forms beside them; ``selfevolve.mass.distill``; the team
    is the champion, or the candidate the confirmation refused: ``SearchResult.team``;
    ``mass/distill.json`` says which forms and why, also when nothing was distilled). The previous
    cycle's champions join the first generation. With ``mass.enabled = false`` (or an empty pool)
    the files hold no search.
    """
    P, params = ctx.paths, ctx.params
    previous = json.loads(ctx.init.mass_champions.read_text()) if ctx.init.mass_champions.exists() else None
    pool = read_jsonl(P.pool, Question)
    if not params.mass.enabled or not pool:
        write_json(P.mass_search, {"enabled": params.mass.enabled, "questions": 0})
        write_json(P.mass_champions, dict(previous or {}) if params.mass.enabled else {})
        write_jsonl(P.mass_trajectories, [])
        write_jsonl(P.mass_distill, [])
        write_json(P.mass_distill_report, empty_report())
        return {"mass_enabled": int(params.mass.enabled), "mass_questions": 0}
    reached = [r.detail.get("form") for r in ctx.distilled_before()]
    ladder = ladder_forms(pool, arith_forms(params)[0], reached=reached) if params.mass.distill_questions else []
    sample = where_designs_differ(ctx.rng("mass_search"), pool, params.sage.frontier_band, params.mass.questions)
    sampling, verify = ctx.sampling("mass_search"), verify_fn(params.verifiers)
    # the probes and the distilled runs at the held-out budget, a call's tokens capped by the limits
    limits = DesignLimits.from_params(params.mass, max_model_len=params.model.max_model_len, max_new_tokens=params.evaluation.max_new_tokens)
    with ctx.backend() as backend:
        outcome = search_and_collect(backend, sample, params.mass, verify, seed=ctx.seed("mass_search"),
                                     sampling=sampling, max_model_len=params.model.max_model_len, previous_champions=previous)
        team = outcome.result.team("math")
        rows, report = distill(backend, team, ladder, ctx.rng("mass_distill"),
                               params.mass.distill_questions, prefix=f"{ctx.cycle}-ladder-", verify_fn=verify, limits=limits,
                               seed=ctx.seed("mass_distill"))
    report |= {"team": team.design_id if team else None, "team_is_champion": team == outcome.result.champions.get("math")}
    write_json(P.mass_search, outcome.result.model_dump(mode="json"))
    write_json(P.mass_champions, outcome.champions_json())
    write_jsonl(P.mass_trajectories, outcome.trajectories)
    write_json(P.mass_distill_report, report)
    write_jsonl(P.mass_distill, rows)
    ctx.log_traces(mass_traces(outcome.trajectories, {q.id: q for q in sample}))
    return outcome.metrics | {"mass_distill_questions": report["questions"], "mass_distill_forms": len(report["forms"]),
                              "mass_distill_team_rows": report["team_rows"], "mass_distill_team_turn_rows": report["team_turn_rows"],
                              "mass_distill_one_pass_rows": report["one_pass_rows"],
                              "mass_distill_team_is_champion": int(report["team_is_champion"])}


def mass_traces(trajectories: list[Trajectory], questions: dict[str, Question], n: int = TRACE_ITEMS) -> list[Span]:
    """One trace per champion run, for the first ``n``: the question in, the workflow's final answer
    and verdict out, a span per agent call (its prompt in, its completion out, its tokens)."""
    roots = []
    for t in trajectories[:n]:
        calls: list[Span] = []
        for m in t.messages:
            if m.role == "assistant" and calls and calls[-1].name == m.agent_id and calls[-1].outputs is None:
                calls[-1].outputs = {"completion": m.content}
                calls[-1].attributes.update(prompt_tokens=m.prompt_tokens, output_tokens=m.output_tokens)
            elif m.role in ("user", "system"):
                calls.append(Span(m.agent_id, "AGENT", inputs={"prompt": m.content}))
        q = questions.get(t.question_id)
        roots.append(Span(f"workflow {t.design_id} on {t.question_id}", "CHAIN", inputs={"question": q.text if q else None},
                          outputs={"final_answer": t.final_answer, "correct": t.correct},
                          attributes={"design": t.design_id, "completed": t.completed, "output_tokens": t.output_tokens},
                          children=calls))
    return roots
