"""The Challenger's stage (SAGE challenge phase): new questions with verifier specs.

Each function here reads the files of earlier stages and writes its own, atomically, and returns a
metrics dict (the runner writes it to ``metrics/<cycle>/<stage>.json`` and logs it to MLflow).
"""

from __future__ import annotations

import ast
from statistics import fmean

from selfevolve.inputs import InputError
from selfevolve.pool import reference_items
from selfevolve.records import ChallengerRollout, CodeSpec, MathSpec, Question, read_jsonl, write_jsonl
from selfevolve.roles import parsers
from selfevolve.roles.forcing import force_answers
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


def _same_number(answer: str | None, value: int) -> bool:
    try:
        return int((answer or "").strip().replace(",", "")) == value
    except ValueError:
        return False


def challenger_question(out: parsers.ChallengerOutput, qid: str, parent: Question, cycle_index: int) -> Question | None:
    """Turn a parsed Challenger completion into a ``Question`` (None when a required part is missing).

    The reference comes from the environment wherever it can be computed: a question that is an
    integer-arithmetic expression gets the expression's exact value as its answer
    (``reference = "environment"``; the Challenger's own answer is kept in
    ``meta.challenger_answer`` and only scored). Other math questions take the Challenger's answer as
    a pseudo-label (``reference = "challenger"``) that counts only if the Solver's majority
    agrees with it (the ``rewards`` stage). Code questions carry the Challenger's tests and reference
    solution, which spec validation runs against each other."""
    if not out.question:
        return None
    common = {"id": qid, "domain": parent.domain, "text": out.question, "source": "challenger", "parent_id": parent.id,
              "cycle": cycle_index}
    if parent.domain == "code":
        if not out.ok:
            return None
        spec = CodeSpec(tests=out.tests, reference_solution=out.reference_solution, entry_point=_entry_point(out.reference_solution))
        return Question(spec=spec, reference="challenger", **common)
    expr = arith.parse_expression(out.question)
    if expr is not None:
        nums, ops = expr
        value = arith.evaluate(nums, ops)
        meta = {"challenger_answer": out.answer, "expression": arith.expression_text(nums, ops), "categories": ["form"]}
        return Question(spec=MathSpec(answer=str(value)), level=arith.level_of(nums, ops), form=arith.form_of(nums, ops),
                        reference="environment", answer_agrees=_same_number(out.answer, value), meta=meta, **common)
    if not out.ok:
        return None
    return Question(spec=MathSpec(answer=out.answer or ""), reference="challenger", **common)


#: Token budget of a forced Challenger part, in units of ``sampling.force_answer_tokens``.
FORCED_PART_BUDGET = {"answer": 1, "tests": 4, "code": 4}


def part_missing(texts: list[str], refs: list[Question], part: str) -> list[int]:
    """Indices of Challenger completions with a question but without ``part`` (``answer`` for math;
    ``tests``, then ``code``, for code), to force it."""
    out = []
    for i, (t, r) in enumerate(zip(texts, refs)):
        p = parsers.parse_challenger(t, r.domain)
        missing = {"answer": r.domain == "math" and not p.ok, "tests": r.domain == "code" and not p.tests,
                   "code": r.domain == "code" and bool(p.tests) and not p.reference_solution}[part]
        if p.question and missing:
            out.append(i)
    return out


def challenge(ctx: StageContext) -> dict:
    """Challenger: ``sage.questions_per_cycle`` new questions, each from a reference item drawn from
    the previous pool (questions on the Solver's frontier ``sage.frontier_boost`` times likelier, and
    ``sage.edge_share`` of them from its edge: ``selfevolve.pool.reference_items``); verifier specs
    validated (``selfevolve.verifiers.spec``). Writes ``challenge.jsonl``. Raises ``InputError`` when
    the previous pool is empty."""
    from selfevolve.verifiers.spec import validate_specs_batch

    params = ctx.params
    pool = read_jsonl(ctx.init.pool, Question)
    if not pool:
        raise InputError(f"{ctx.init.pool} is empty: the Challenger needs reference items; check seeds.set in params.yaml "
                         "and re-run the stages before this one (`dvc repro`)")
    rng = ctx.rng("challenge")
    sage = params.sage
    refs = reference_items(rng, pool, sage.questions_per_cycle, sage.frontier_band, sage.frontier_boost, sage.edge_share)
    prompts = [render("challenger", domain=r.domain, reference=reference_text(r)) for r in refs]
    convs = [ctx.chat("challenger", p, r.domain) for p, r in zip(prompts, refs)]
    with ctx.backend() as backend:
        texts = [c[0].text for c in backend.chat(convs, ctx.sampling("challenge"))]
        r_f = [parsers.parse_challenger(t, r.domain).format_reward for t, r in zip(texts, refs)]
        forced: set[int] = set()
        budget = params.sampling.force_answer_tokens
        for part in (FORCED_PART_BUDGET if budget > 0 else ()):  # answer; tests, then code (forced tests may now exist)
            todo = part_missing(texts, refs, part)
            for i, t in zip(todo, force_answers(backend, [convs[i] for i in todo], [texts[i] for i in todo],
                                                budget * FORCED_PART_BUDGET[part], ctx.seed(f"force-{part}"), part)):
                texts[i] = t
            forced.update(todo)
    rollouts, questions = [], []
    for i, (ref, prompt, text) in enumerate(zip(refs, prompts, texts)):
        parsed = parsers.parse_challenger(text, ref.domain)
        parsed.format_reward = r_f[i]  # the unforced text's
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
    env = [q for _, q in questions if q.reference == "environment"]
    levels = [q.level for _, q in questions if q.level is not None]
    return {
        "challenger_rollouts": n,
        "challenger_forced_rate": len(forced) / n,
        "challenger_parsed_rate": len(questions) / n,
        "challenger_spec_valid_rate": sum(r.spec_valid for r in rollouts) / n,
        "challenger_format_reward": fmean(r.format_reward for r in rollouts),
        "challenger_environment_reference_rate": len(env) / n,
        "challenger_answer_agreement": fmean(bool(q.answer_agrees) for q in env) if env else 0.0,
        "challenger_mean_level": fmean(levels) if levels else 0.0,
    }
