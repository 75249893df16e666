"""Role transcripts rendered from seed questions: the warm-start data of the embedded model.

Each transcript is a chat (``[{"role": "user", ...}, {"role": "assistant", ...}]``) of one of the
four SAGE roles, built with the same prompt templates the pipeline uses, so the warm-started model
already speaks every role's format. Arithmetic transcripts carry exact worked solutions; Critic
transcripts pair well-formed items (high scores) with corrupted ones (low scores) so the Critic
starts out able to separate them.
"""

from __future__ import annotations

import random

from selfevolve.records import Question, Rollout
from selfevolve.roles.templates import messages
from selfevolve.questions import arith

PLANS = {
    "+": ["add the digits column by column from the right", "carry 1 when a column is over 9", "read the digits back as the result"],
    "-": ["subtract column by column from the right", "borrow 1 when a column goes below 0", "put a minus sign if the second number is larger"],
    "*": ["multiply each digit from the right by the single digit", "carry the tens to the next column", "read the digits back as the result"],
    "mix": ["work from left to right", "do each operation column by column", "keep the sign of the running total"],
}


#: Share of each role in the warm-start transcripts ("practice": alignment practice,
#: :func:`practice_transcript`, its share taken from the Solver's by ``arith_transcripts(practice_share=)``).
ROLE_WEIGHTS = {"solver": 0.7, "practice": 0.0, "challenger": 0.1, "planner": 0.06, "critic_question": 0.08, "critic_plan": 0.06}
#: How :func:`split_transcript` draws the split workflow's roles; the combiner's copy is the one
#: learned last (docs/measurements.md). The parts are the Solver's own seed-form problems, so they
#: need no role of their own.
SPLIT_ROLES = {"splitter": 0.4, "combiner": 0.6}
#: The practice task's operands have 1 to this many digits, each drawn on its own.
PRACTICE_DIGITS = 7
#: The split round's splitter reads operands of 1 to this many digits (reading only: it writes no
#: sum). Measured (docs/measurements.md, "December 6 (late)"): a splitter taught on operands of at
#: most 6 digits copied only 6 digits of a 7-digit number, so the team's reach ended at 6+6; 1,500
#: steps on operands up to 9 digits from a c4 model took the team from 0 to 0.5-0.7 on 7+3 .. 8+4.
SPLIT_READ_DIGITS = 9


def plan_text(ops: list[str]) -> str:
    key = ops[0] if len(set(ops)) == 1 else "mix"
    return " ".join(f"{i}. {s}" for i, s in enumerate(PLANS[key], 1))


def solver_completion(q: Question) -> str:
    return f"<think>{q.meta['worked']}</think><answer>{q.spec.answer}</answer>"


def _corrupt(rng: random.Random, text: str) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return text.split(" ")[0] + " " + rng.choice(["+", "-", "*"]) + " ."
    if kind == 1:
        return "Compute " + " ".join(rng.choice(["+", "-", "*", "?", "="]) for _ in range(rng.randint(1, 4))) + "."
    if kind == 2:
        return text.replace("Compute", rng.choice(["", "Compute Compute", "Co mpute"])).replace(" ", "", 1)
    if kind == 3:
        return text[: max(1, len(text) // 2)]
    return "".join(rng.sample(text, len(text)))


Chat = list[dict[str, str]]
#: The SAGE role of each prompt template (the Critic has one per target).
SAGE_ROLE = {"solver": "solver", "challenger": "challenger", "planner": "planner", "critic_question": "critic",
             "critic_plan": "critic"}


def _chat(role: str, completion: str, **fields) -> tuple[str, Chat]:
    return SAGE_ROLE[role], messages(role, **fields) + [{"role": "assistant", "content": completion}]


def solver_transcript(rng: random.Random, q: Question) -> tuple[str, Chat]:
    """The Solver's transcript of arith question ``q``: the question (with its op's plan in half of
    them, drawn from ``rng``) -> the worked scratchpad and the answer."""
    plan = plan_text(q.meta["ops"]) if rng.random() < 0.5 else None
    return _chat("solver", solver_completion(q), question=q.text, domain="math", plan=plan)


def practice_transcript(rng: random.Random, restate: bool = False, max_digits: int = PRACTICE_DIGITS) -> tuple[str, Chat]:
    """Alignment practice for the Solver: ``Align 153 + 5385.`` -> ``<think>153+5385 0153+5385</think>``,
    the head of the worked sum (``arith.scratchpad``: the operands as written when ``restate``, then the
    :func:`arith.aligned` line) and nothing after it: no column step, no sum, no ``<answer>``. The two
    operands' digit counts are drawn independently from 1 to ``max_digits``, so every pair of lengths
    is aligned, while the seed forms alone never pad a first operand of 3+ digits or pair two long
    ones. Measured (docs/measurements.md, "December 3 (late): reading practice"): with the copy alone
    (``Copy a + b.`` -> ``<think>a+b</think><answer>a+b</answer>``) the restated line was right for every
    form up to 5+5 and every 3+4 / 4+4 error moved into the aligned line (``01533+05385`` for 153 +
    5385), and the model carried the copied ``<answer>`` over to sums it could not compute; hence the
    aligned line here, the verb unlike "Compute" and no answer. Its question is no arith expression
    (``arith.parse_expression`` reads none), so no Challenger or pool treats it as one. Without the
    restated operands, at share 0.08 (the default, docs/measurements.md "December 4 (evening)"), the
    warm starts of three seeds reached a base frontier of 0.78-0.87 (0.32-0.64 without practice),
    none needing an extra round. It teaches the line's width, which for the wider half of the sums
    is the sum's parity, never a digit of a sum."""
    a, b = (arith.operand(rng, rng.randint(1, max_digits)) for _ in range(2))
    head = [f"{a}+{b}"] * restate + [arith.aligned(a, b)]
    return _chat("solver", f"<think>{' '.join(head)}</think>", question=f"Align {a} + {b}.", domain="math", plan=None)


def split_transcript(rng: random.Random, seed_forms: list[str], max_digits: int = SPLIT_READ_DIGITS,
                     role: str | None = None) -> tuple[str, Chat]:
    """One transcript of a role of the split workflow (``selfevolve.mass.design.split_solver_combine``),
    drawn by :data:`SPLIT_ROLES` (or the given ``role``, one of its keys); the warm start's split
    round trains on them (``warm_start.split_role_rows``) and checks its roles on fresh ones
    (``warm_start.split_role_check``). None holds the sum of a question beyond the seed forms:

    * splitter: ``Compute a + b.`` (each operand 1 to ``max_digits`` digits, drawn on its own) ->
      both numbers padded, then ``<low>..</low><high>..</high>`` (``arith.split_reply``): reading,
      like the alignment practice;
    * combiner: a seed-form problem shown with a low and a high sum drawn at random (unrelated to it,
      so its answer is no sum of any question; the high sum up to the ``max_digits`` operands'
      high parts' sum, every third one ending in nines, whose increment carries through them:
      ``8869 + 1`` written ``8860`` was its commonest slip) -> ``arith.combine_worked`` and the
      combined number.

    The parts between them go to the Solver as its own problems (``arith.part_question``), which
    the warm start's Solver transcripts teach. Returns ``("solver", chat)``: the rows train and
    replay with the Solver's. Raises ``ValueError`` for an unknown ``role``."""
    from selfevolve.mass import design as D

    if role is None:
        role = rng.choices(list(SPLIT_ROLES), weights=list(SPLIT_ROLES.values()))[0]
    elif role not in SPLIT_ROLES:
        raise ValueError(f"role must be one of {sorted(SPLIT_ROLES)}, got {role!r}")
    if role == "splitter":
        a, b = (arith.operand(rng, rng.randint(1, max_digits)) for _ in range(2))
        user = D.compose_prompt(D.SPLIT_INSTRUCTION, f"Compute {arith.expression_text([a, b], ['+'])}.")
        reply = arith.split_reply(a, b)
    else:
        shown = arith.make_question(rng, rng.choice(seed_forms), "combine")
        tops = [2 * 10 ** d - 2 for d in range(1, max(arith.SPLIT_DIGITS, max_digits - arith.SPLIT_DIGITS) + 1)]
        low_sum, high_sum = rng.randint(0, 2 * 10 ** arith.SPLIT_DIGITS - 2), rng.randint(0, rng.choice([0, *tops]))
        if rng.random() < 1 / 3:
            nines = rng.randint(1, len(str(high_sum)))
            high_sum = high_sum // 10 ** nines * 10 ** nines + 10 ** nines - 1
        user = D.compose_prompt(D.COMBINE_INSTRUCTION, shown.text, [(D.LOW_SUM, str(low_sum)), (D.HIGH_SUM, str(high_sum))])
        reply = f"<think>{arith.combine_worked(low_sum, high_sum)}</think><answer>{arith.combine_sums(low_sum, high_sum)}</answer>"
    return "solver", [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def as_rows(transcripts: list[tuple[str, Chat]], prefix: str = "warm") -> list[Rollout]:
    """Role-tagged transcripts as training rows (prompt = the user turn, completion = the reply)."""
    return [Rollout(id=f"{prefix}-{i}", role=role, group=f"{prefix}-{i}", question_id="", prompt=chat[0]["content"],
                    completion=chat[1]["content"], reward=1.0, detail={"source": "warm_start"})
            for i, (role, chat) in enumerate(transcripts)]


def arith_transcripts(n: int, seed: int = 0, forms: list[str] | None = None, role_weights: dict[str, float] | None = None,
                      practice_share: float = 0.0, restate: bool = False) -> list[tuple[str, Chat]]:
    """``n`` role transcripts over the arith ``forms`` (default: ``arith.seed_forms()``), deterministic
    for ``seed``. Roles are mixed by ``role_weights`` (default ``ROLE_WEIGHTS`` with ``practice_share`` of
    the Solver's share moved to the practice task: mostly Solver, whose accuracy is what everything else
    builds on); ``restate``: the worked sums' format (``arith.scratchpad``).

    * Solver: the question (with the role's plan in half of them) -> worked scratchpad + answer.
    * Practice (:func:`practice_transcript`): a sum's operands aligned as its worked steps start, no sum.
    * Challenger: a reference question of one form -> a new question one step up the ladder
      (``arith.harder_form``) or of the same form, with its answer (no worked steps: the environment
      computes the reference of an arithmetic question, the Challenger's answer is only scored). A
      step onto a form outside ``forms`` (the frontier) writes the question alone, without its
      answer: the Challenger learns to step up, and no transcript holds the answer to a question
      the warm start does not teach (637 of 60,000 did, with the answer; confining the step to
      ``forms`` instead left the Challenger writing 97 % warm-start forms, docs/measurements.md).
    * Planner: the op's short plan. Critic: well-formed questions of the forms and one step up score
      high, corrupted ones low; the right plan scores high, another op's plan low.
    """
    from selfevolve.questions.arith import harder_form

    forms = forms or arith.seed_forms()
    inside = set(forms)
    weights = role_weights or {**ROLE_WEIGHTS, "solver": ROLE_WEIGHTS["solver"] - practice_share, "practice": practice_share}
    roles, cum = list(weights), list(weights.values())
    rng = random.Random(seed)
    out: list[tuple[str, Chat]] = []
    for i in range(n):
        form = rng.choice(forms)
        q = arith.make_question(rng, form, f"t{i}", restate=restate)
        ops = q.meta["ops"]
        role = rng.choices(roles, weights=cum)[0]
        if role == "solver":
            out.append(solver_transcript(rng, q))
        elif role == "practice":
            out.append(practice_transcript(rng, restate))
        elif role == "challenger":
            new = arith.make_question(rng, harder_form(form, rng) if rng.random() < 0.67 else form, f"t{i}n")
            ref = f"{q.text} Answer: {q.spec.answer}"
            answer = f"<answer>{new.spec.answer}</answer>" if new.form in inside else ""
            out.append(_chat("challenger", f"<question>{new.text}</question>{answer}", domain="math", reference=ref))
        elif role == "planner":
            out.append(_chat("planner", f"<plan>{plan_text(ops)}</plan>", question=q.text))
        elif role == "critic_question":
            if rng.random() < 0.5:
                good = q if rng.random() < 0.5 else arith.make_question(rng, harder_form(form, rng), f"t{i}h")
                out.append(_chat("critic_question", f"<score>{rng.choice([8, 9, 9, 10])}</score>", question=good.text))
            else:
                out.append(_chat("critic_question", f"<score>{rng.choice([1, 2, 2, 3])}</score>", question=_corrupt(rng, q.text)))
        else:
            if rng.random() < 0.5:
                out.append(_chat("critic_plan", f"<score>{rng.choice([8, 9, 9])}</score>", question=q.text, plan=plan_text(ops)))
            else:
                wrong = rng.choice([k for k in PLANS if k != (ops[0] if len(ops) == 1 else "mix")])
                bad = " ".join(f"{j}. {s}" for j, s in enumerate(PLANS[wrong], 1))
                out.append(_chat("critic_plan", f"<score>{rng.choice([2, 3, 3, 4])}</score>", question=q.text, plan=bad))
    return out


def code_transcripts(questions: list[Question], n: int, seed: int = 0) -> list[tuple[str, Chat]]:
    """(SAGE role, chat) transcripts for code seed items (Solver with the reference solution, Challenger
    writing another item's question/tests/solution, Critic and Planner). Deterministic."""
    rng = random.Random(seed)
    out = []
    if not questions:
        return out
    for _ in range(n):
        q = rng.choice(questions)
        sol = q.spec.reference_solution or ""
        r = rng.random()
        if r < 0.45:
            out.append(_chat("solver", f"<answer>{sol}</answer>", question=q.text, domain="code", plan=None))
        elif r < 0.7:
            other = rng.choice(questions)
            tests = "\n".join(other.spec.tests)
            ref = q.text
            out.append(_chat("challenger", f"<question>{other.text}</question><tests>{tests}</tests><code>{other.spec.reference_solution}</code>",
                             domain="code", reference=ref))
        elif r < 0.8:
            out.append(_chat("planner", "<plan>1. read the inputs 2. compute the result with a loop or an expression 3. return it</plan>", question=q.text))
        else:
            good = rng.random() < 0.5
            text = q.text if good else _corrupt(rng, q.text)
            out.append(_chat("critic_question", f"<score>{rng.choice([8, 9]) if good else rng.choice([1, 2, 3])}</score>", question=text))
    return out
