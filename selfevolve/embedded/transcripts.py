"""Role transcripts rendered from seed questions: the warm-start data of the embedded model.

Each transcript is a chat (``[{"role": "user", ...}, {"role": "assistant", ...}]``) of one of the
four SAGE roles, built with the same prompt templates the pipeline uses, so the warm-started model
already speaks every role's format. Arithmetic transcripts carry exact worked solutions; Critic
transcripts pair well-formed items (high scores) with corrupted ones (low scores) so the Critic
starts out able to separate them.
"""

from __future__ import annotations

import random

from selfevolve.records import Question
from selfevolve.roles.templates import messages
from selfevolve.questions import arith

PLANS = {
    "+": ["add the digits column by column from the right", "carry 1 when a column is over 9", "read the digits back as the result"],
    "-": ["subtract column by column from the right", "borrow 1 when a column goes below 0", "put a minus sign if the second number is larger"],
    "*": ["multiply each digit from the right by the single digit", "carry the tens to the next column", "read the digits back as the result"],
    "mix": ["work from left to right", "do each operation column by column", "keep the sign of the running total"],
}


def plan_text(ops: list[str]) -> str:
    key = ops[0] if len(ops) == 1 else "mix"
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


def _chat(role: str, completion: str, **fields) -> list[dict[str, str]]:
    return messages(role, **fields) + [{"role": "assistant", "content": completion}]


def arith_transcripts(n: int, seed: int = 0, levels=arith.SEED_LEVELS) -> list[list[dict[str, str]]]:
    """``n`` role transcripts over the seed levels, mixed Solver 55 %, Challenger 15 %, Planner 10 %,
    Critic of questions 10 %, Critic of plans 10 %. The Challenger's new questions go up to one
    level above its reference (so up to level 6, leaving room to push). Deterministic for ``seed``.

    Most of the budget goes to the Solver: its accuracy is what the cycle's rewards need to have
    spread (GRPO/REINFORCE++ groups with all-zero rewards carry no signal)."""
    rng = random.Random(seed)
    out: list[list[dict[str, str]]] = []
    roles = ["solver"] * 11 + ["challenger"] * 3 + ["planner"] * 2 + ["critic_question"] * 2 + ["critic_plan"] * 2
    for i in range(n):
        level = rng.choice(levels)
        q = arith.make_question(rng, level, f"t{i}")
        ops = q.meta["ops"]
        role = rng.choice(roles)
        if role == "solver":
            plan = plan_text(ops) if rng.random() < 0.5 else None
            out.append(_chat("solver", solver_completion(q), question=q.text, domain="math", plan=plan))
        elif role == "challenger":
            new = arith.make_question(rng, min(level + rng.choice([0, 0, 1]), max(arith.LEVELS)), f"t{i}n")
            ref = f"{q.text} Answer: {q.spec.answer}"
            out.append(_chat("challenger", f"<question>{new.text}</question><think>{new.meta['worked']}</think><answer>{new.spec.answer}</answer>",
                             domain="math", reference=ref))
        elif role == "planner":
            out.append(_chat("planner", f"<plan>{plan_text(ops)}</plan>", question=q.text))
        elif role == "critic_question":
            if rng.random() < 0.5:
                out.append(_chat("critic_question", f"<score>{rng.choice([8, 9, 9, 10])}</score>", question=q.text))
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


def code_transcripts(questions: list[Question], n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """Role transcripts for code seed items (Solver with the reference solution, Challenger
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
