"""The ``tiny-code`` seed set: small Python functions with assert-based tests, graded by level.

Each item is generated from a family (a task template with random constants); the expected
values in the asserts are computed here by trusted Python, and the reference solution is the
family's source with the constants filled in.

=====  ==========================================================
level  families
=====  ==========================================================
1      add a constant; multiply by a constant
2      a linear expression of two arguments; absolute difference
3      sum / count of list elements over a threshold
4      string: reverse, count a character, repeat
5      loops: factorial, n-th Fibonacci number, sum of digits
=====  ==========================================================
"""

from __future__ import annotations

import math
import random

from selfevolve.records import CodeSpec, Question

# (level, question template, solution template, python function computing the answer, arg sampler)
_FAMILIES = [
    (1, "Write a Python function f(x) that returns x plus {k}.", "def f(x):\n    return x + {k}\n",
     lambda k: (lambda x: x + k), lambda r: (r.randint(-50, 50),)),
    (1, "Write a Python function f(x) that returns x times {k}.", "def f(x):\n    return x * {k}\n",
     lambda k: (lambda x: x * k), lambda r: (r.randint(-20, 20),)),
    (2, "Write a Python function f(a, b) that returns {k} * a + b.", "def f(a, b):\n    return {k} * a + b\n",
     lambda k: (lambda a, b: k * a + b), lambda r: (r.randint(-20, 20), r.randint(-20, 20))),
    (2, "Write a Python function f(a, b) that returns the absolute difference of a and b plus {k}.",
     "def f(a, b):\n    return abs(a - b) + {k}\n", lambda k: (lambda a, b: abs(a - b) + k), lambda r: (r.randint(-30, 30), r.randint(-30, 30))),
    (3, "Write a Python function f(xs) that returns the sum of the numbers in the list xs that are greater than {k}.",
     "def f(xs):\n    return sum(x for x in xs if x > {k})\n", lambda k: (lambda xs: sum(x for x in xs if x > k)),
     lambda r: ([r.randint(-10, 20) for _ in range(r.randint(0, 6))],)),
    (3, "Write a Python function f(xs) that returns how many numbers in the list xs are divisible by {k}.",
     "def f(xs):\n    return sum(1 for x in xs if x % {k} == 0)\n", lambda k: (lambda xs: sum(1 for x in xs if x % k == 0)),
     lambda r: ([r.randint(-30, 30) for _ in range(r.randint(0, 6))],)),
    (4, "Write a Python function f(s) that returns the string s reversed and repeated {k} times.",
     "def f(s):\n    return s[::-1] * {k}\n", lambda k: (lambda s: s[::-1] * k),
     lambda r: ("".join(r.choice("abcxyz") for _ in range(r.randint(0, 5))),)),
    (4, "Write a Python function f(s) that returns how many times the letter '{c}' occurs in the string s.",
     "def f(s):\n    return s.count('{c}')\n", lambda c: (lambda s: s.count(c)),
     lambda r: ("".join(r.choice("abca") for _ in range(r.randint(0, 8))),)),
    (5, "Write a Python function f(n) that returns the factorial of n plus {k}.",
     "def f(n):\n    p = 1\n    for i in range(2, n + 1):\n        p *= i\n    return p + {k}\n", lambda k: (lambda n: math.factorial(n) + k),
     lambda r: (r.randint(0, 8),)),
    (5, "Write a Python function f(n) that returns the sum of the decimal digits of n times {k}.",
     "def f(n):\n    return sum(int(c) for c in str(abs(n))) * {k}\n", lambda k: (lambda n: sum(int(c) for c in str(abs(n))) * k),
     lambda r: (r.randint(0, 99999),)),
]


def make_question(rng: random.Random, qid: str, level: int | None = None) -> Question:
    """One generated item; ``level`` picks among that level's families (any level when None)."""
    fams = [f for f in _FAMILIES if level is None or f[0] == level]
    lvl, qt, st, fn, sampler = rng.choice(fams)
    if "{c}" in qt:
        const = rng.choice("abc")
        text, sol, f = qt.format(c=const), st.format(c=const), fn(const)
    else:
        const = rng.randint(2, 9)
        text, sol, f = qt.format(k=const), st.format(k=const), fn(const)
    tests = []
    for _ in range(3):
        args = sampler(rng)
        tests.append(f"assert f({', '.join(repr(a) for a in args)}) == {f(*args)!r}")
    return Question(id=qid, domain="code", text=text, spec=CodeSpec(entry_point="f", tests=tests, reference_solution=sol),
                    level=lvl, source="seed:tiny-code")


def generate(n: int, seed: int = 0, prefix: str = "code") -> list[Question]:
    """``n`` items, deterministic for ``seed``; ids ``{prefix}-{i:05d}``."""
    rng = random.Random(seed)
    return [make_question(rng, f"{prefix}-{i:05d}") for i in range(n)]


def split(n_pool: int, n_val: int, n_heldout: int, seed: int = 0) -> tuple[list[Question], list[Question], list[Question]]:
    """(pool, validation, held-out) with no repeated question text across the three."""
    items = generate(4 * (n_pool + n_val + n_heldout), seed=seed)
    seen, unique = set(), []
    for q in items:
        key = (q.text, tuple(q.spec.tests))
        if key not in seen:
            seen.add(key)
            unique.append(q)
    pool, val, held = unique[:n_pool], unique[n_pool:n_pool + n_val], unique[n_pool + n_val:n_pool + n_val + n_heldout]
    return ([q.model_copy(update={"id": f"seed-{i:05d}"}) for i, q in enumerate(pool)],
            [q.model_copy(update={"id": f"val-{i:05d}"}) for i, q in enumerate(val)],
            [q.model_copy(update={"id": f"heldout-{i:05d}"}) for i, q in enumerate(held)])
