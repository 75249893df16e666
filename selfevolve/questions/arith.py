"""The ``arith`` seed set: procedurally generated integer-arithmetic questions with exact answers.

Levels (1 = easiest) leave the Challenger room to push difficulty up:

=====  =====================================  ==========
level  form                                   example
=====  =====================================  ==========
1      1-digit + 1-digit                      3 + 5
2      2-digit + 1-digit, 1-digit - 1-digit   47 + 8
3      2-digit + 2-digit                      47 + 85
4      2-digit - 2-digit (may be negative)    38 - 71
5      2-digit x 1-digit                      47 * 6
6      3-digit + 3-digit                      507 + 698
7      three 2-digit operands, + and -        47 + 85 - 19
=====  =====================================  ==========

Worked solutions use a least-significant-digit-first scratchpad inside ``<think>``: a small
transformer learns column arithmetic written this way far more easily than whole answers
(measured: 2-digit addition went from 18 % to 99 % held-out within a minute of SFT on 2 cores
once digits were written this way).
"""

from __future__ import annotations

import random
import re

from selfevolve.records import MathSpec, Question

LEVELS = (1, 2, 3, 4, 5, 6, 7)
SEED_LEVELS = (1, 2, 3, 4, 5)  # seed set and held-out; levels 6-7 are left for the Challenger to reach
_EXPR = re.compile(r"^\s*-?\d+(\s*[-+*]\s*-?\d+)+\s*$")


def _operands(rng: random.Random, level: int) -> tuple[list[int], list[str]]:
    d1, d2, d3 = (lambda: rng.randint(0, 9)), (lambda: rng.randint(10, 99)), (lambda: rng.randint(100, 999))
    if level == 1:
        return [d1(), d1()], ["+"]
    if level == 2:
        return ([d2(), d1()], ["+"]) if rng.random() < 0.5 else (sorted([d1(), d1()], reverse=True), ["-"])
    if level == 3:
        return [d2(), d2()], ["+"]
    if level == 4:
        return [d2(), d2()], ["-"]
    if level == 5:
        return [d2(), rng.randint(2, 9)], ["*"]
    if level == 6:
        return [d3(), d3()], ["+"]
    if level == 7:
        return [d2(), d2(), d2()], [rng.choice("+-"), rng.choice("+-")]
    raise ValueError(f"arith level must be one of {LEVELS}, got {level}")


def expression_text(nums: list[int], ops: list[str]) -> str:
    parts = [str(nums[0])]
    for op, n in zip(ops, nums[1:]):
        parts += [op, str(n)]
    return " ".join(parts)


def evaluate(nums: list[int], ops: list[str]) -> int:
    """Left-to-right value with * binding tighter (the forms above have at most one *)."""
    if "*" in ops:
        assert len(nums) == 2
        return nums[0] * nums[1]
    total = nums[0]
    for op, n in zip(ops, nums[1:]):
        total = total + n if op == "+" else total - n
    return total


def _digits_lsb(n: int) -> list[int]:
    return [int(c) for c in reversed(str(abs(n)))]


def _add_steps(a: int, b: int) -> list[str]:
    da, db = _digits_lsb(a), _digits_lsb(b)
    carry, out, steps = 0, [], []
    for i in range(max(len(da), len(db))):
        x = da[i] if i < len(da) else 0
        y = db[i] if i < len(db) else 0
        s = x + y + carry
        steps.append(f"{x}+{y}+{carry}={s}")
        out.append(s % 10)
        carry = s // 10
    if carry:
        out.append(carry)
    steps.append("r=" + "".join(map(str, out)))
    return steps


def _sub_steps(a: int, b: int) -> list[str]:
    """a - b column by column; if b > a compute b - a and mark the sign."""
    sign = ""
    if b > a:
        a, b, sign = b, a, "-"
        steps = ["swap -"]
    else:
        steps = []
    da, db = _digits_lsb(a), _digits_lsb(b)
    borrow, out = 0, []
    for i in range(len(da)):
        x, y = da[i], (db[i] if i < len(db) else 0)
        s = x - y - borrow
        nb = 1 if s < 0 else 0
        steps.append(f"{x}-{y}-{borrow}={s + 10 * nb}")
        out.append(s + 10 * nb)
        borrow = nb
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    steps.append("r=" + sign + "".join(map(str, out)))
    return steps


def _mul_steps(a: int, b: int) -> list[str]:
    da = _digits_lsb(a)
    carry, out, steps = 0, [], []
    for x in da:
        s = x * b + carry
        steps.append(f"{x}*{b}+{carry}={s}")
        out.append(s % 10)
        carry = s // 10
    if carry:
        out.extend(_digits_lsb(carry))
    steps.append("r=" + "".join(map(str, out)))
    return steps


def scratchpad(nums: list[int], ops: list[str]) -> str:
    """The worked steps (without tags) for an expression, left to right."""
    acc, lines = nums[0], []
    for op, n in zip(ops, nums[1:]):
        if op == "+":
            lines += _add_steps(acc, n) if acc >= 0 else _sub_steps(n, -acc)
            acc = acc + n
        elif op == "-":
            lines += _sub_steps(acc, n) if acc >= 0 else [f"{acc}-{n}"] + _add_steps(-acc, n)
            acc = acc - n
        else:
            lines += _mul_steps(acc, n)
            acc = acc * n
        lines.append(f"={acc}")
    return " ".join(lines)


def make_question(rng: random.Random, level: int, qid: str) -> Question:
    nums, ops = _operands(rng, level)
    expr = expression_text(nums, ops)
    value = evaluate(nums, ops)
    return Question(
        id=qid,
        domain="math",
        text=f"Compute {expr}.",
        spec=MathSpec(answer=str(value)),
        level=level,
        source="seed:arith",
        meta={"expression": expr, "nums": nums, "ops": ops, "worked": scratchpad(nums, ops)},
    )


def generate(n: int, seed: int = 0, levels: tuple[int, ...] = SEED_LEVELS, prefix: str = "arith",
             weights: tuple[float, ...] | None = None) -> list[Question]:
    """``n`` questions with levels drawn from ``levels`` (uniform unless ``weights``);
    deterministic for a given ``seed``. Ids are ``{prefix}-{i:05d}``."""
    rng = random.Random(seed)
    return [make_question(rng, rng.choices(levels, weights=weights)[0], f"{prefix}-{i:05d}") for i in range(n)]


def parse_expression(text: str) -> tuple[list[int], list[str]] | None:
    """Find a pure integer expression in a question ("Compute 3 + 4.", "What is 7 - 12?").

    Returns (operands, operators) or None when the text holds no such expression. Never raises.
    """
    if not isinstance(text, str) or len(text) > 500:
        return None
    body = re.sub(r"^\s*(compute|calculate|what is|evaluate|find)\s*:?\s*", "", text.strip(), flags=re.I)
    body = body.rstrip(" .?!=")
    if not _EXPR.match(body):
        return None
    tokens = re.findall(r"(?<![\d])-?\d+|[-+*]", body.replace(" ", ""))
    nums, ops, expect_num = [], [], True
    for t in tokens:
        if expect_num:
            if not re.fullmatch(r"-?\d+", t):
                return None
            nums.append(int(t))
        else:
            if t not in "+-*":
                return None
            ops.append(t)
        expect_num = not expect_num
    if len(nums) != len(ops) + 1 or len(nums) < 2 or ops.count("*") > 1 or any(abs(x) > 10**6 for x in nums):
        return None
    return nums, ops


def level_of(nums: list[int], ops: list[str]) -> int:
    """Best-matching level for an expression a Challenger wrote (for pool statistics)."""
    width = max(len(str(abs(x))) for x in nums)
    if len(nums) >= 3:
        return 7
    if "*" in ops:
        return 5
    if width >= 3:
        return 6
    if ops == ["-"]:
        return 4 if width >= 2 else 2
    small = min(len(str(abs(x))) for x in nums)
    return 1 if width == 1 else (2 if small == 1 else 3)
