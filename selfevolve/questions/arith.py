"""The ``arith`` seed set: an open-ended ladder of integer-arithmetic questions with exact answers.

A question's *form* is its operator and the digit count of each operand, written ``"4+2"`` (a
4-digit number plus a 2-digit one) or ``"3+3+2"``; its *level* is its largest operand's digit
count plus one per operand beyond two. The ladder has no top: a Challenger can always go one step
harder by adding a digit to an operand or adding an operand.

The embedded campaign's seed set (``seed_forms``) is every sum of two operands of 1 to
``seed_digits`` digits, plus *footholds*: an n-digit number plus a 1- or 2-digit one, in both orders,
for n beyond the seed levels (``foothold_digits``). A model trained on plain 1-3 digit sums writes
exactly the 3 columns it saw and solves no 4-digit sum, not even by sampling (nothing to learn
from). The footholds teach it to write n columns, which gives it a small success rate one step
further: measured on the embedded model, 4-digit + 3-digit sums 6 % greedy and 20 % pass@8, 5 + 3
digits 37 % greedy; with 1-digit footholds only, the 4-digit sums stayed at 0 % (pass@8 under 1 %).
Self-improvement grows from there. The *frontier* (``frontier_forms``) of level L is every
two-operand form with L digits in its larger operand and more digits than the footholds in the
other: never supervised, only reached by the Challenger's questions.

Worked solutions use a least-significant-digit-first scratchpad inside ``<think>``: a small
transformer learns column arithmetic written this way far more easily than whole answers
(measured: 2-digit addition went from 18 % to 99 % held-out within a minute of SFT on 2 cores once
digits were written this way). Sources of the regime: Lee et al. 2025, "Self-Improving Transformers
Overcome Easy-to-Hard and Length Generalization Challenges" (arXiv 2502.01612).
"""

from __future__ import annotations

import random
import re
from typing import Iterable, Sequence

from selfevolve.records import MathSpec, Question

OPS = ("+", "-", "*")
_EXPR = re.compile(r"^\s*-?\d+(\s*[-+*]\s*-?\d+)+\s*$")
MAX_DIGITS = 40        # the ladder's practical top (answers stay exact Python integers)
MAX_OPERANDS = 4


# ------------------------------------------------------------------------------------------
# forms and levels
# ------------------------------------------------------------------------------------------


def form_name(op: str, digits: Sequence[int]) -> str:
    """``("+", (4, 2))`` -> ``"4+2"``."""
    return op.join(str(d) for d in digits)


def parse_form(name: str) -> tuple[str, tuple[int, ...]]:
    """``"4+2"`` -> ``("+", (4, 2))``. Raises ``ValueError`` for anything else (one operator, 2 to
    ``MAX_OPERANDS`` operands of 1 to ``MAX_DIGITS`` digits; ``*`` takes a 1-digit second operand)."""
    m = re.fullmatch(r"(\d+)(?:([-+*])(\d+))+", name or "")
    ops = set(re.findall(r"[-+*]", name or ""))
    if not m or len(ops) != 1:
        raise ValueError(f"not an arith form: {name!r} (expected e.g. '4+2' or '3+3+2')")
    op = ops.pop()
    digits = tuple(int(x) for x in re.split(r"[-+*]", name))
    if not 2 <= len(digits) <= MAX_OPERANDS or not all(1 <= d <= MAX_DIGITS for d in digits):
        raise ValueError(f"arith form {name!r}: 2 to {MAX_OPERANDS} operands of 1 to {MAX_DIGITS} digits")
    if op == "*" and (len(digits) != 2 or digits[1] != 1):
        raise ValueError(f"arith form {name!r}: products take a 1-digit second operand")
    return op, digits


def level(digits: Sequence[int]) -> int:
    """The ladder's level of a form: largest operand's digits, plus one per operand beyond two."""
    return max(digits) + len(digits) - 2


def seed_forms(seed_digits: int = 3, foothold_digits: Iterable[int] = (4, 5), foothold_short: int = 2, op: str = "+") -> list[str]:
    """The warm start's forms: every pair of 1..``seed_digits``-digit operands, plus the footholds
    n + k and k + n for every n in ``foothold_digits`` and k = 1..``foothold_short``."""
    forms = [form_name(op, (a, b)) for a in range(1, seed_digits + 1) for b in range(1, seed_digits + 1)]
    for n in foothold_digits:
        for k in range(1, foothold_short + 1):
            forms += [form_name(op, (n, k)), form_name(op, (k, n))]
    return list(dict.fromkeys(forms))


def frontier_forms(lvl: int, min_short: int = 3, op: str = "+") -> list[str]:
    """Two-operand forms of level ``lvl`` with at least ``min_short`` digits in the shorter operand
    (the forms the footholds do not cover), both orders."""
    forms = []
    for k in range(min_short, lvl + 1):
        forms += [form_name(op, (lvl, k)), form_name(op, (k, lvl))]
    return list(dict.fromkeys(forms))


def forms_of_levels(levels: Iterable[int], op: str = "+") -> list[str]:
    """Every two-operand form whose level is in ``levels`` (both orders, any shorter operand)."""
    return [form_name(op, (a, b)) for lv in levels for a in range(1, lv + 1) for b in range(1, lv + 1) if max(a, b) == lv]


def rung_size(form: str) -> int:
    """A form's place on the ladder for measuring reach: its operands' digit count in total
    (``"4+3"`` -> 7, ``"4+4"`` -> 8, ``"5+4"`` -> 9). Raises ``ValueError`` for a non-form."""
    return sum(parse_form(form)[1])


def reach(form_accuracy: dict[str, float], threshold: float) -> int:
    """How far a model reaches on the ladder: the largest :func:`rung_size` among the forms whose
    accuracy is at least ``threshold`` (0 when none is). ``form_accuracy`` maps a form (``"4+3"``)
    to a greedy accuracy in [0, 1]; forms that do not parse are ignored."""
    sizes = []
    for form, acc in form_accuracy.items():
        try:
            size = rung_size(form)
        except ValueError:
            continue
        if acc >= threshold:
            sizes.append(size)
    return max(sizes, default=0)


def ladder_holes(form_accuracy: dict[str, float], low: float = 0.1, high: float = 0.5) -> dict[str, str]:
    """Forms the model fails while it solves a harder one: each form answered at most ``low`` right
    whose every operand is no longer than those of another form (same operator and operand count)
    answered at least ``high`` right, mapped to the hardest such form. ``form_accuracy`` as for
    :func:`reach`. A hole is not the edge of what the model can do but one skill missing inside it:
    measured (docs/measurements.md, "December 7 (night)"), seed 0's held-out 3+7, 4+7, 7+3, 7+4
    stayed at 0 through c2 while 8+4 rose to 0.71 — the split team's combiner could not copy a
    7-digit answer, and :func:`reach` alone never showed it."""
    parsed = {}
    for form, acc in form_accuracy.items():
        try:
            parsed[form] = (parse_form(form), acc)
        except ValueError:
            continue
    holes = {}
    for form, ((op, digits), acc) in parsed.items():
        if acc > low:
            continue
        harder = [(sum(d), other) for other, ((o, d), a) in parsed.items()
                  if other != form and a >= high and o == op and len(d) == len(digits)
                  and all(x >= y for x, y in zip(d, digits))]
        if harder:
            holes[form] = max(harder)[1]
    return dict(sorted(holes.items(), key=lambda kv: (rung_size(kv[0]), kv[0])))


# ------------------------------------------------------------------------------------------
# values and worked solutions
# ------------------------------------------------------------------------------------------


def operand(rng: random.Random, digits: int) -> int:
    """A uniformly drawn number with exactly ``digits`` digits (0-9 for one digit)."""
    return rng.randint(0, 9) if digits == 1 else rng.randint(10 ** (digits - 1), 10 ** digits - 1)


def expression_text(nums: list[int], ops: list[str]) -> str:
    parts = [str(nums[0])]
    for op, n in zip(ops, nums[1:]):
        parts += [op, str(n)]
    return " ".join(parts)


def evaluate(nums: list[int], ops: list[str]) -> int:
    """The value with ``*`` binding tighter than ``+`` and ``-`` (left to right otherwise)."""
    terms, signs = [nums[0]], []
    for op, n in zip(ops, nums[1:]):
        if op == "*":
            terms[-1] = terms[-1] * n
        else:
            signs.append(op)
            terms.append(n)
    total = terms[0]
    for op, t in zip(signs, terms[1:]):
        total = total + t if op == "+" else total - t
    return total


def _digits_lsb(n: int) -> list[int]:
    return [int(c) for c in reversed(str(abs(n)))]


def _add_steps(a: int, b: int, width: int = 0) -> list[str]:
    """Column steps of ``a + b`` from the right, over at least ``width`` columns."""
    da, db = _digits_lsb(a), _digits_lsb(b)
    carry, out, steps = 0, [], []
    for i in range(max(len(da), len(db), width)):
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


def aligned(a: int, b: int) -> str:
    """``a+b`` with both operands zero-padded to one width (``1234+0567``): the alignment line before
    a sum's column steps, so that column i reads the i-th digit from the right of two numbers of
    equal length. The width is the longer operand's digits, plus one when ``a + b`` is odd: half the
    worked sums carry a leading zero column (``0123+0456``, then a step ``0+0+0=0``), so the warm
    start writes 4-column sums whose second operand has three nonzero digits (3+3) and 4-column sums
    with a nonzero fourth digit (4+1, 4+2) without ever seeing a 4+3 sum, which combines the two.
    Measured (docs/measurements.md, "December 3 (evening)"): the same warm start, seed and steps
    without the wider half reached frontier pass@8 0.000, with it 0.31."""
    width = line_width(a, b)
    return f"{a:0{width}d}+{b:0{width}d}"


def line_width(a: int, b: int) -> int:
    """The columns of ``a + b``'s :func:`aligned` line and of its column steps: the longer operand's
    digits, plus one when ``a + b`` is odd."""
    return max(len(str(a)), len(str(b))) + (a + b) % 2


def scratchpad(nums: list[int], ops: list[str], restate: bool = False) -> str:
    """The worked steps (without tags) for an expression, left to right: a sum of two non-negative
    numbers starts with its :func:`aligned` line, then one step per column from the right
    (``x+y+carry=s``), the result's digits from the right (``r=...``) and its value (``=...``).
    With ``restate`` the sum first restates its operands as written (``1857+374 01857+00374 ...``):
    measured on the embedded warm start (docs/measurements.md, "December 3: the alignment line at a
    fixed width" and "December 3 (late): reading practice"), the frontier's errors moved from the
    aligned line into this plain copy, which a practice task (``bootstrap.practice_share``) then teaches.
    Products take a 1-digit second operand as generated here; a product elsewhere gets its value only."""
    acc, lines = nums[0], []
    for op, n in zip(ops, nums[1:]):
        if op == "+":
            head = [f"{acc}+{n}"] * restate + [aligned(acc, n)]
            lines += (head + _add_steps(acc, n, line_width(acc, n))) if acc >= 0 else _sub_steps(n, -acc)
            acc = acc + n
        elif op == "-":
            lines += _sub_steps(acc, n) if acc >= 0 else [f"{acc}-{n}"] + _add_steps(-acc, n)
            acc = acc - n
        else:
            lines += _mul_steps(acc, n) if 0 <= n <= 9 and acc >= 0 else [f"{acc}*{n}"]
            acc = acc * n
        lines.append(f"={acc}")
    return " ".join(lines)


#: The low part's digits in a split sum (:func:`split_parts`): the seed forms' operand length, so
#: that every sum up to 6+6 digits splits into two seed-form sums; a longer one's high part is a
#: sum the single pass has to have learned (4+4 digits for 7+7), so the team reaches further as it does.
SPLIT_DIGITS = 3


def split_parts(a: int, b: int, digits: int = SPLIT_DIGITS) -> tuple[str, str, str]:
    """How the splitter writes ``a + b``'s parts: ``(padded, low, high)``, with both numbers
    zero-padded to one width (``2 * digits``, or the longer number's length), the low part the last
    ``digits`` of each padded number and the high part the digits before them, zeros kept:
    ``4050 + 542`` -> ``("004050+000542", "050 + 542", "004 + 000")``: ``a mod 10^d, b mod 10^d``
    and ``a div 10^d, b div 10^d`` for ``d = digits``, so ``a + b = (high sum) * 10^d + (low sum)``,
    the decomposition of SECToR (Zhang et al. 2023, arXiv 2309.08589, Sec. 3: a long sum from the
    shorter sums the model already does) that the split workflow (``selfevolve.mass.design``) runs.
    Measured (docs/measurements.md, "December 5 (night)"): the parts copied
    from the numbers as written (``<low>050 + 542</low>``, an offset from each number's end) were
    misread by one seed's splitter on most 4-digit operands (its workflow 0.41 on the frontier;
    0.93 after 1,000 more steps); copied from the padded line at fixed places, 0.98 on the frontier
    and 0.85 beyond instead of 0.52, from the same model and steps."""
    width = max(2 * digits, len(str(a)), len(str(b)))
    pa, pb = f"{a:0{width}d}", f"{b:0{width}d}"
    return f"{pa}+{pb}", f"{pa[-digits:]} + {pb[-digits:]}", f"{pa[:-digits]} + {pb[:-digits]}"


def split_reply(a: int, b: int, digits: int = SPLIT_DIGITS) -> str:
    """The splitter's whole reply for ``a + b`` (:func:`split_parts`):
    ``<think>004050+000542</think><low>050 + 542</low><high>004 + 000</high>``; no sum, no answer."""
    padded, low, high = split_parts(a, b, digits)
    return f"<think>{padded}</think><low>{low}</low><high>{high}</high>"


def combine_sums(low: int, high: int, digits: int = SPLIT_DIGITS) -> int:
    """``a + b`` from its parts' sums (:func:`split_parts`): the low sum's carry (its digits above the
    ``digits`` lowest) added to the high sum, followed by the low sum's ``digits`` lowest digits."""
    m = 10 ** digits
    return (high + low // m) * m + low % m


def combine_worked(low: int, high: int, digits: int = SPLIT_DIGITS) -> str:
    """The combiner's worked steps (without tags) for :func:`combine_sums`:
    ``high 718 low 1499 carry 1 rest 499 high 718+1=719 join 719 499``. The high sum is copied
    first, right after the prompt that ends with it; the low sum is written zero-padded to
    ``digits + 1`` digits, so its carry is its first digit and its rest the others; the answer is
    the last two numbers written together (leading zeros dropped). Measured (docs/measurements.md,
    "December 5 (evening): a workflow that reaches past the single pass"): without the closing
    ``join`` the answer's copy of the rest failed on most 6-digit sums; and ("December 6
    (evening)") with the high sum copied only after the low one's steps, a warm start on an AVX2
    CPU's float32 path never learned that copy (combiner 0.36 on fresh transcripts, 0.41 after
    600 more steps; copied first: 0.92 after those 600 steps)."""
    m = 10 ** digits
    carry, rest = low // m, f"{low % m:0{digits}d}"
    return (f"high {high} low {low:0{digits + 1}d} carry {carry} rest {rest} high {high}+{carry}={high + carry} "
            f"join {high + carry} {rest}")


def make_question(rng: random.Random, form: str, qid: str, split: str | None = None, restate: bool = False,
                  source: str = "seed:arith") -> Question:
    """One question of ``form`` (e.g. ``"4+2"``), ids ``qid``; ``form`` and ``split``
    (``seed``/``frontier``/``beyond``) are the question's fields and the categories results are
    broken down by; ``restate``: the worked solution's format (:func:`scratchpad`); ``source``: where
    it came from (the seed set by default)."""
    op, digits = parse_form(form)
    nums = [operand(rng, d) for d in digits]
    ops = [op] * (len(nums) - 1)
    expr = expression_text(nums, ops)
    meta = {"expression": expr, "nums": nums, "ops": ops, "worked": scratchpad(nums, ops, restate),
            "categories": ["form"] + (["split"] if split else [])}
    return Question(id=qid, domain="math", text=f"Compute {expr}.", spec=MathSpec(answer=str(evaluate(nums, ops))),
                    level=level(digits), source=source, form=form, split=split, meta=meta)


def generate(n: int, seed: int = 0, forms: Sequence[str] | None = None, prefix: str = "arith", split: str | None = None,
             levels: Iterable[int] | None = None) -> list[Question]:
    """``n`` questions with forms drawn uniformly from ``forms`` (default: ``seed_forms()``; or every
    two-operand form of ``levels``), deterministic for ``seed``. Ids are ``{prefix}-{i:05d}``."""
    if forms is None:
        forms = forms_of_levels(levels) if levels is not None else seed_forms()
    forms = list(forms)
    for f in forms:
        parse_form(f)
    rng = random.Random(seed)
    return [make_question(rng, rng.choice(forms), f"{prefix}-{i:05d}", split) for i in range(n)]


def longer_forms(form: str) -> list[str]:
    """The forms one digit longer than ``form``, one per operand that can grow (a product's first
    operand only): ``"4+4"`` -> ``["5+4", "4+5"]``, ``"3*1"`` -> ``["4*1"]``. Raises ``ValueError``
    for a non-form."""
    op, digits = parse_form(form)
    out = []
    for i in range(1 if op == "*" else len(digits)):
        new = list(digits)
        new[i] = min(MAX_DIGITS, new[i] + 1)
        out.append(form_name(op, new))
    return out


def no_easier(form: str, than: str) -> bool:
    """Whether ``form`` is at least as hard as ``than`` by operand length: the same operator and
    operand count, every operand at least as long (``"6+4"`` than ``"6+3"``: True; ``"5+4"`` than
    ``"6+3"``: False). False, not ``ValueError``, when either is not a form (a pool may hold other
    seed sets' questions)."""
    try:
        (op, digits), (op2, digits2) = parse_form(form), parse_form(than)
    except ValueError:
        return False
    return op == op2 and len(digits) == len(digits2) and all(a >= b for a, b in zip(digits, digits2))


def harder_form(form: str, rng: random.Random, max_operands: int = 3) -> str:
    """One step up the ladder from ``form``: a digit more on one operand (usually: one of
    :func:`longer_forms`) or, for sums and differences, one more operand."""
    op, digits = parse_form(form)
    if op != "*" and len(digits) < max_operands and rng.random() < 0.1:
        return form_name(op, (*digits, 1))
    return longer_forms(form)[0 if op == "*" else rng.randrange(len(digits))]


# ------------------------------------------------------------------------------------------
# reading questions the Challenger wrote
# ------------------------------------------------------------------------------------------


def parse_expression(text: str) -> tuple[list[int], list[str]] | None:
    """Find a pure integer expression in a question ("Compute 3 + 4.", "What is 7 - 12?").

    Returns (operands, operators) or None when the text holds no such expression (or one off the
    ladder: more than ``MAX_OPERANDS`` operands or ``MAX_DIGITS`` digits). Never raises.
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
    if len(nums) != len(ops) + 1 or not 2 <= len(nums) <= MAX_OPERANDS or any(len(str(abs(x))) > MAX_DIGITS for x in nums):
        return None
    return nums, ops


def part_question(text: str) -> str | None:
    """A part a splitter wrote (``"042 + 767"``) as the question a Solver is asked
    (``"Compute 42 + 767."``: :func:`make_question`'s wording, leading zeros dropped), so the model's
    own single pass answers the part (SECToR, Zhang et al. 2023, arXiv 2309.08589, Sec. 3: a long sum
    from shorter sums the model already does). None when ``text`` holds no expression
    (:func:`parse_expression`). Never raises."""
    parsed = parse_expression(text)
    return None if parsed is None else f"Compute {expression_text(*parsed)}."


def form_of(nums: list[int], ops: list[str]) -> str:
    """The form of an expression (``"mixed"`` operators are written with the first one's symbol
    per position: ``"4+2-1"``)."""
    parts = [str(len(str(abs(nums[0]))))]
    for op, n in zip(ops, nums[1:]):
        parts += [op, str(len(str(abs(n))))]
    return "".join(parts)


def level_of(nums: list[int], ops: list[str]) -> int:
    """The ladder level of an expression a Challenger wrote (for pool statistics)."""
    return level([len(str(abs(x))) for x in nums])
