"""The Challenger's stage (SAGE challenge phase): new questions with verifier specs.

Each function here reads the files of earlier stages and writes its own, atomically, and returns a
metrics dict (the runner writes it to ``metrics/<cycle>/<stage>.json`` and logs it to MLflow).
"""

from __future__ import annotations

import ast
from statistics import fmean

from selfevolve.records import ChallengerRollout, CodeSpec, MathSpec, Question, read_jsonl, write_jsonl
from selfevolve.roles import parsers
from selfevolve.roles.templates import render
from selfevolve.questions import arith
from selfevolve.stages.context import StageContext


def reference_text(q: Question) -> str:
    """How a reference item is shown to the Challenger: the question, and its answer for math."""
    return f"{q.text} Answer: {q.spec.answer}" if isinstance(q.spec, MathSpec) else q.text


def _entry_point(code: str | None) -> str | None:
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


def challenge(ctx: StageContext) -> dict:
    """Challenger: ``sage.questions_per_cycle`` new questions, each from a reference item drawn from
    the previous pool; verifier specs validated (``selfevolve.verifiers.spec``). Writes
    ``challenge.jsonl``. Raises ``ValueError`` when the previous pool is empty."""
    from selfevolve.verifiers.spec import validate_specs_batch

    params = ctx.params
    pool = read_jsonl(ctx.init.pool, Question)
    if not pool:
        raise ValueError(f"{ctx.init.pool} is empty: the Challenger needs reference items")
    rng = ctx.rng("challenge")
    refs = [rng.choice(pool) for _ in range(params.sage.questions_per_cycle)]
    prompts = [render("challenger", domain=r.domain, reference=reference_text(r)) for r in refs]
    with ctx.backend() as backend:
        comps = backend.chat([[{"role": "user", "content": p}] for p in prompts], ctx.sampling("challenge"))
    rollouts, questions = [], []
    for i, (ref, prompt, c) in enumerate(zip(refs, prompts, comps)):
        text = c[0].text
        parsed = parsers.parse_challenger(text, ref.domain)
        q = challenger_question(parsed, f"{ctx.cycle}-q{i:04d}", ref, ctx.index)
        rollouts.append(ChallengerRollout(id=f"{ctx.cycle}-ch{i:04d}", parent_id=ref.id, domain=ref.domain, prompt=prompt,
                                          completion=text, question=q, format_reward=parsed.format_reward,
                                          spec_reason=parsed.error or ""))
        if q is not None:
            questions.append((len(rollouts) - 1, q))
    checks = validate_specs_batch([q for _, q in questions], banned_modules=params.verifiers.banned_modules,
                                  timeout_s=params.verifiers.code_timeout_s)
    for (i, _), chk in zip(questions, checks):
        rollouts[i].spec_valid, rollouts[i].spec_reason = chk.valid, chk.reason
    write_jsonl(ctx.paths.challenge, rollouts)
    n = len(rollouts)
    return {
        "challenger_rollouts": n,
        "challenger_parsed_rate": len(questions) / n,
        "challenger_spec_valid_rate": sum(r.spec_valid for r in rollouts) / n,
        "challenger_format_reward": fmean(r.format_reward for r in rollouts),
    }
