"""Verifier-spec validation (selfevolve.verifiers.spec): math and code specs the Challenger writes."""

from __future__ import annotations

from fractions import Fraction

import pytest

from selfevolve.config import VerifierParams
from selfevolve.records import CodeSpec, IOCase, MathSpec, Question
from selfevolve.verifiers.spec import (
    SpecCheck,
    arithmetic_expression,
    banned_import,
    evaluate_arithmetic,
    parse_number,
    validate_spec,
    validate_specs_batch,
)

BANNED = VerifierParams().banned_modules




def math_q(text: str, answer: str, qid: str = "m") -> Question:
    return Question(id=qid, domain="math", text=text, spec=MathSpec(answer=answer), source="challenger")


def code_q(program: str | None, tests=(), qid: str = "c", **kw) -> Question:
    return Question(id=qid, domain="code", text="Write f.", source="challenger",
                    spec=CodeSpec(reference_solution=program, tests=list(tests), **kw))


# ----------------------------------------------------------------------------- arithmetic helpers

@pytest.mark.parametrize("text, expr", [
    ("Compute 23 + 45 * 2.", "23 + 45 * 2"),
    ("What is 7 - 12?", "7 - 12"),
    ("what's (3+4)*5 = ?", "(3+4)*5"),
    ("Calculate: 2^10", "2^10"),
    ("Evaluate -3 × 4 ÷ 6.", "-3 × 4 ÷ 6"),
    ("Find the value of 100 - 1", "100 - 1"),
    ("12 * 12 =", "12 * 12"),
])
def test_arithmetic_expression_found(text, expr):
    assert arithmetic_expression(text) == expr


@pytest.mark.parametrize("text", [
    "Find x if 2x = 6.", "What is 2.5 + 1?", "How many apples are left after 3 + 4?", "Compute the sum.",
    "What is __import__('os').system('true')?", "Compute 3 +", "", "Simplify x + x.",
])
def test_arithmetic_expression_not_found(text):
    assert arithmetic_expression(text) is None


def test_evaluate_arithmetic_is_exact_and_safe():
    assert evaluate_arithmetic("23 + 45 * 2") == 113
    assert evaluate_arithmetic("7 - 12") == -5
    assert evaluate_arithmetic("(3+4)*5") == 35
    assert evaluate_arithmetic("7 / 2") == Fraction(7, 2)
    assert evaluate_arithmetic("2^10") == 1024 and evaluate_arithmetic("2**-2") == Fraction(1, 4)
    assert evaluate_arithmetic("-3 × 4 ÷ 6") == -2
    assert evaluate_arithmetic("17 // 5 + 17 % 5") == 5
    for bad in ("1 / 0", "5 % 0", "2 ** 100000", "9 ** 9 ** 9", "0 ** -1", "x + 1", "__import__('os')",
                "(1).__class__", "[1][0]", "1 if 1 else 2", "2 ** 0.5", "+".join(["1"] * 300)):
        with pytest.raises(ValueError):
            evaluate_arithmetic(bad)


@pytest.mark.parametrize("answer, value", [
    ("113", 113), ("-5", -5), ("3.5", Fraction(7, 2)), ("7/2", Fraction(7, 2)), ("\\frac{7}{2}", Fraction(7, 2)),
    ("-\\dfrac{1}{4}", Fraction(-1, 4)), ("\\boxed{1,024}", 1024), ("$12$", 12), ("12.", 12), ("−3", -3),
    ("x", None), ("\\sqrt{2}", None), ("1/0", None), ("", None),
])
def test_parse_number(answer, value):
    assert parse_number(answer) == value


# ----------------------------------------------------------------------------- math specs

def test_math_specs(pool):
    qs = [
        math_q("Compute 23 + 45 * 2.", "113"),
        math_q("Compute 23 + 45 * 2.", "136"),
        math_q("What is 7 - 12?", "-5"),
        math_q("What is 7 / 2?", "\\frac{7}{2}"),
        math_q("What is 7 / 2?", "3"),
        math_q("Compute 5 / 0.", "0"),
        math_q("A train leaves at 3 pm and travels 120 km at 60 km/h. When does it arrive?", "5 pm"),
        math_q("Find x if 2x = 6.", "3"),
        math_q("Find x if 2x = 6.", "   "),
        math_q("Find x if 2x = 6.", "???"),
        math_q("Compute 1 + 1.", "two"),
    ]
    checks = validate_specs_batch(qs, BANNED, pool=pool)
    assert [c.valid for c in checks] == [True, False, True, True, False, False, True, True, False, False, False]
    assert checks[1].reason == "reference answer 136 disagrees with the expression's value 113"
    assert checks[4].reason == "reference answer 3 disagrees with the expression's value 7/2"
    assert "division by zero" in checks[5].reason
    assert checks[8].reason == "reference answer is empty"
    assert "parse" in checks[9].reason
    assert "not a number" in checks[10].reason
    assert all(c.reason == "ok" for c in checks if c.valid)
    assert all(len(c.reason) < 200 for c in checks)


# ----------------------------------------------------------------------------- banned imports

@pytest.mark.parametrize("src, hit", [
    ("import os", "os"),
    ("import os.path as p", "os"),
    ("from subprocess import run", "subprocess"),
    ("import json, socket", "socket"),
    ("import importlib\nimportlib.import_module('math')", "importlib"),
    ("from importlib import import_module", "importlib"),
    ("def f():\n    import threading\n    return 1", "threading"),
    ("x = __import__('math')", "__import__"),
    ("import builtins\nbuiltins.__import__('os')", "__import__"),
    ("getattr(__builtins__, '__import__')('os')", "__import__"),
    ("exec('import shutil')", "shutil"),
    ("eval(compile('import ctypes', 's', 'exec'))", "ctypes"),
])
def test_banned_import_found(src, hit):
    why = banned_import(src, BANNED)
    assert why is not None and hit in why


def test_banned_import_allows_ordinary_code_and_is_configurable():
    ok = "import math, re, collections\nfrom itertools import permutations\nimport json as j\nx = 'import os'\n"
    assert banned_import(ok, BANNED) is None
    assert banned_import("import math", ["math"]) == "imports banned module 'math' (line 1)"
    assert banned_import("from xml.etree import ElementTree", ["xml"]) is not None
    assert banned_import("from os import path", []) is None
    assert banned_import("x = import_module('os')", BANNED) is not None
    with pytest.raises(SyntaxError):
        banned_import("def (", BANNED)


# ----------------------------------------------------------------------------- code specs

def test_valid_code_spec(pool):
    q = code_q("def f(x):\n    return sorted(set(x))\n", ["assert f([3, 1, 3]) == [1, 3]", "assert f([]) == []"],
               entry_point="f")
    assert validate_spec(q, BANNED, pool=pool) == SpecCheck(True, "ok")
    humaneval_style = code_q("def add(a, b):\n    return a + b\n",
                             ["def check(candidate):\n    for i in range(20):\n        assert candidate(i, 1) == i + 1\n",
                              "check(add)"])
    assert validate_spec(humaneval_style, BANNED, pool=pool).valid
    io = code_q("print(sum(map(int, input().split())))\n", io_cases=[IOCase(stdin="1 2", stdout="3")])
    assert validate_spec(io, BANNED, pool=pool).valid
    ordered = code_q("def f():\n    return list({'pear', 'fig', 'kiwi', 'plum'})\n", ["assert len(f()) == 4"])
    assert validate_spec(ordered, BANNED, pool=pool).valid  # set order is reproducible (fixed hash seed)


def test_nondeterministic_programs_rejected(pool):
    qs = [
        code_q("import random\ndef f():\n    return random.randint(1, 10 ** 9)\n", ["assert f() > 0"]),
        code_q("import time\ndef f():\n    return time.perf_counter_ns()\n", ["assert f() >= 0"]),
        code_q("import random\nprint(random.random())\ndef f():\n    return 1\n", ["assert f() == 1"]),
        code_q("import random\nprint(random.randint(1, 10 ** 9))\n", io_cases=[IOCase(stdin="", stdout="0")]),
        code_q("def f():\n    return id(object()) % 7 < 7 and [object()]\n", ["assert f()"]),
    ]
    checks = validate_specs_batch(qs, BANNED, pool=pool)
    assert [c.valid for c in checks[:3]] == [False, False, False], checks
    assert all(c.reason.startswith("nondeterministic") for c in checks[:3]), checks
    # io specs are judged on their whole output: a random program fails (or differs between runs)
    assert not checks[3].valid and ("fails its tests" in checks[3].reason or "nondeterministic" in checks[3].reason)
    # object addresses are masked, so this one is deterministic enough to be valid
    assert checks[4].valid, checks[4]


def test_banned_import_rejected(pool):
    checks = validate_specs_batch([
        code_q("import os\ndef f():\n    return 1\n", ["assert f() == 1"]),
        code_q("def f():\n    return __import__('subprocess')\n", ["assert f()"]),
        code_q("def f():\n    return 1\n", ["import socket\nassert f() == 1"]),
        code_q("import math\ndef f():\n    return math.pi\n", ["assert f() > 3"]),
    ], BANNED, pool=pool)
    assert checks[0] == SpecCheck(False, "reference solution imports banned module 'os' (line 1)")
    assert checks[1] == SpecCheck(False, "reference solution uses __import__ (line 2)")
    assert checks[2] == SpecCheck(False, "test 0 imports banned module 'socket' (line 1)")
    assert checks[3].valid
    assert not validate_spec(code_q("import math\ndef f():\n    return 1\n", ["assert f() == 1"]), ["math"], pool=pool).valid


def test_reference_failing_its_tests_rejected(pool):
    checks = validate_specs_batch([
        code_q("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(2) == 4"]),
        code_q("def f(x):\n    return 1 / 0\n", ["assert f(1) == 1"]),
        code_q("print(int(input()) * 3)\n", io_cases=[IOCase(stdin="2", stdout="5")]),
        code_q("def f():\n    while True:\n        pass\n", ["assert f()"]),
        code_q("raise SystemExit(1)\ndef f():\n    return 1\n", ["assert f() == 1"]),
    ], BANNED, timeout_s=1.0, pool=pool)
    assert checks[0].reason == "reference solution fails its tests: 1/2 passed; first failure: AssertionError"
    assert "ZeroDivisionError" in checks[1].reason and not checks[1].valid
    assert "wrong output" in checks[2].reason
    assert checks[3] == SpecCheck(False, "reference solution timed out")
    assert "fails to run" in checks[4].reason


def test_malformed_code_specs_rejected(pool):
    checks = validate_specs_batch([
        code_q("def f(x) return x\n", ["assert f(1) == 1"]),
        code_q(None, ["assert f(1) == 1"]),
        code_q("def f():\n    return 1\n", []),
        code_q("def g():\n    return 1\n", ["assert g() == 1"], entry_point="f"),
        code_q("def f():\n    return 1\n", ["assert f( == 1"]),
    ], BANNED, pool=pool)
    assert checks[0].reason == "reference solution does not parse: expected ':' (line 1)"
    assert checks[1].reason == "no reference solution"
    assert checks[2].reason == "no tests or io cases"
    assert checks[3].reason == "reference solution does not define entry point 'f'"
    assert checks[4].reason.startswith("test 0 does not parse")


def test_batch_mixes_domains_in_order(pool):
    qs = [math_q("Compute 2 + 2.", "4", "a"), code_q("def f():\n    return 4\n", ["assert f() == 4"], "b"),
          math_q("Compute 2 + 2.", "5", "c"), code_q("import os\n", ["assert True"], "d")]
    assert [c.valid for c in validate_specs_batch(qs, BANNED, pool=pool)] == [True, True, False, False]
    assert validate_specs_batch([], BANNED) == []
    assert bool(SpecCheck(True, "ok")) and not SpecCheck(False, "x")
