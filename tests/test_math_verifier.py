"""Math verifier: answer extraction, equivalence policies, time limits in worker processes, and the
acceptance criteria on real benchmark gold answers (full GSM8K test, MATH-500, OlympiadBench).

GSM8K gold accuracy through ``selfevolve grade`` lives in tests/test_grade_cli.py.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfevolve.questions.benchmarks import load_benchmark
from selfevolve.verifiers.math import (
    DEFAULT_ORDER,
    MathGrade,
    extract_answer,
    grade_math,
    grade_math_batch,
    normalize_answer,
    validate_math_answer,
    validate_math_answers,
)

# --------------------------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the total is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("first \\boxed{1} then \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("nested \\boxed{\\frac{a}{b^{2}}} end", "\\frac{a}{b^{2}}"),
        ("\\fbox{7}", "7"),
        ("\\boxed 5 apples", "5"),
        ("She makes 9 * 2 = $18.\n#### 1,000", "1,000"),
        ("Thinking... The answer is 18 dollars.", "18 dollars"),
        ("Final answer: $x = 3$. Done", "x = 3"),
        ("<answer>42</answer>", "42"),
        ("<answer>so \\boxed{7}</answer> and later 9", "7"),
        ("<answer>I counted 12 apples in total</answer>", "12"),
        ("<answer>-3.5", "-3.5"),  # unclosed tag (truncated generation)
        ("$\\frac{1}{3},-2,5$", "$\\frac{1}{3},-2,5$"),
        ("It is 3.5.", "3.5"),
        ("we have 1,234,567 items and 3 boxes", "3"),
        ("no digits at all here", None),
        ("", None),
        ("\\boxed{unclosed", None),
        ("so the answer is \\boxed{12", None),  # truncated: no answer, not the 12
        ("\\boxed{5} and at last \\boxed{", None),
        ("The answer is (1, 2", None),
        ("It fell to \u22123.", "-3"),
        ("The final answer is $8$,$4$", "8, 4"),
        ("The final answer is $2$ and $3$.", "2, 3"),
        ("The final answer is $f(x)=ax+b$, where $b$ is any integer.", "f(x)=ax+b, where $b$ is any integer"),
        ("\\boxed{2} and \\boxed{5}", "5"),  # one answer unless the gold lists more (see test_grading_classes)
    ],
)
def test_extract_answer_examples(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_order_is_configurable():
    text = "<answer>5</answer> but \\boxed{6} and #### 7"
    assert extract_answer(text) == "5"
    assert extract_answer(text, order=("boxed", "answer_tag")) == "6"
    assert extract_answer(text, order=("gsm8k",)) == "7"
    assert extract_answer("just prose with 3 numbers 4", order=("boxed",)) is None
    with pytest.raises(ValueError, match="unknown extraction strategies"):
        extract_answer("x", order=("boxed", "nope"))


@pytest.mark.parametrize("junk", [None, 12, 3.5, b"\\boxed{4}", ["a"], {"a": 1}, object()])
def test_extract_answer_non_strings(junk):
    got = extract_answer(junk)
    assert got is None or got == "4"


_PIECES = st.sampled_from(
    ["\\boxed{", "\\fbox", "{", "}", "\\{", "\\}", "\\", "####", "<answer>", "</answer>", "$", "$$", "\\(", "\\)",
     "The answer is", "answer:", "1,000", "-3.5", "3/4", "\\frac{1}{2}", "%", "\n", " ", "°", "\x00", "\ud800", "é", "**"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=60).map("".join)))
def test_extract_answer_never_raises(text):
    got = extract_answer(text)
    assert got is None or (isinstance(got, str) and got.strip() == got and got)
    assert isinstance(normalize_answer(got), str)
    assert isinstance(normalize_answer(text), str)


def test_extract_answer_is_fast_on_huge_input():
    text = ("\\boxed{" * 20000) + ("1, " * 100000) + "{" * 50000
    t0 = time.perf_counter()
    extract_answer(text)
    assert time.perf_counter() - t0 < 5.0


# --------------------------------------------------------------------------------------------
# equivalence policies (one batch: one pool round trip)
# --------------------------------------------------------------------------------------------

POLICY_CASES = [
    # (gold, prediction text, accepted?)
    ("1000", "#### 1,000", True),
    ("10000", "\\boxed{10,\\!000}", True),
    ("1000", "\\boxed{1{,}000}", True),
    ("1000000", "The answer is 1,000,000.", True),
    ("1000", "\\boxed{1\\,000}", True),
    ("1000", "\\boxed{1 000}", True),
    ("1,2", "\\boxed{12}", False),
    ("\\frac{1}{2}", "\\boxed{0.5}", True),
    ("\\dfrac{3}{4}", "\\boxed{\\tfrac34}", True),
    ("\\frac{3}{4}", "\\boxed{3/4}", True),
    ("\\frac{1}{3}", "\\boxed{0.333333}", True),
    ("\\frac{1}{3}", "\\boxed{0.33}", False),
    ("50\\%", "\\boxed{50}", True),
    ("50", "The answer is 50%.", True),
    ("50\\%", "\\boxed{50 percent}", True),
    ("50\\%", "\\boxed{0.5}", False),
    ("55^\\circ", "\\boxed{55}", True),
    ("55", "\\boxed{55°}", True),
    ("\\$18.90", "#### $18.90", True),
    ("18", "The answer is 18 dollars.", True),
    ("10\\text{ cm}", "\\boxed{10}", True),
    ("10", "\\boxed{10 \\text{ inches}}", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\pi/2)}", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(\\pi/2, 3)}", False),
    ("(1,2,3)", "\\boxed{(1,2)}", False),
    ("[2,5)", "\\boxed{[2, 5)}", True),
    ("[2,5)", "\\boxed{(2,5)}", False),
    ("\\{1,2\\}", "\\boxed{\\{2,1\\}}", True),
    ("2,-1,-18", "$-18, 2, -1$", True),
    ("2,-1,-18", "$2, -1$", False),
    ("-2,-2", "\\boxed{-2}", False),
    ("-2,-2", "\\boxed{-2, -2}", True),
    ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\boxed{\\begin{pmatrix} 0.2 \\\\ -3.6 \\end{pmatrix}}", True),
    ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\boxed{\\begin{pmatrix} 0.2 \\\\ 3.6 \\end{pmatrix}}", False),
    ("3\\sqrt{2}", "\\boxed{\\sqrt{18}}", True),
    ("x^2+2x+1", "\\boxed{(x+1)^2}", True),
    ("x^2+2x+1", "\\boxed{(x-1)^2}", False),
    ("5", "\\boxed{x = 5}", True),
    ("\\text{(E)}", "\\boxed{\\text{(E)}}", True),
    ("\\text{(E)}", "\\boxed{\\text{(D)}}", False),
    ("52_8", "\\boxed{52_{8}}", True),
    ("52_8", "\\boxed{53_8}", False),
    ("52_8", "\\boxed{42}", False),
    ("18", "I have no idea.", False),
    # the question's computation restated is no answer (math-verify would evaluate it)
    ("11015", "<answer>8086+2929</answer>", False),
    ("14", "\\boxed{(3+4) \\times 2}", False),
    ("11015", "<answer>11015</answer>", True),
    ("0.75", "\\boxed{3/4}", True),
    ("12000", "\\boxed{1.2 \\times 10^4}", True),
    ("x+1", "\\boxed{1+x}", True),
]


def test_equivalence_policies():
    grades = grade_math_batch([(g, p) for g, p, _ in POLICY_CASES], timeout_s=10.0)
    wrong = [(g, p, want, gr) for (g, p, want), gr in zip(POLICY_CASES, grades) if gr.correct != want]
    assert not wrong, "\n".join(f"gold={g!r} pred={p!r} want={w} got {gr}" for g, p, w, gr in wrong)


def test_statuses_and_fields():
    ok, wrong, none, bad_gold = grade_math_batch(
        [("18", "#### 18"), ("18", "#### 19"), ("18", "no number here"), ("", "#### 18")], timeout_s=10.0
    )
    assert isinstance(ok, MathGrade) and ok.correct and ok.status == "correct" and ok.extracted == "18"
    assert not wrong.correct and wrong.status == "wrong" and wrong.extracted == "19" and "19" in wrong.detail
    assert none.status == "no_answer" and none.extracted is None and not none.correct
    assert bad_gold.status == "error" and not bad_gold.correct
    assert ok.to_dict() == {"correct": True, "status": "correct", "extracted": "18", "detail": ""}


def test_validate_math_answer():
    assert validate_math_answer("\\frac{1}{2}") == (True, "ok")
    assert validate_math_answer("(3, \\pi/2)")[0]
    assert validate_math_answer("1,000")[0]
    for bad in ["", "   ", "the answer is not known yet", "x" * 2000]:
        ok, reason = validate_math_answer(bad)
        assert not ok and reason
    assert [ok for ok, _ in validate_math_answers(["1", "", "2x+1"])] == [True, False, True]


# --------------------------------------------------------------------------------------------
# time limits, recovery, order, threads
# --------------------------------------------------------------------------------------------

# Real slow paths in sympy (no test hooks): expanding (x+1)^1000 - (x+2)^1000 in simplify, and a
# comparison of two huge powers (big-integer arithmetic).
SLOW_SIMPLIFY = ("(x+1)^{1000}", "\\boxed{(x+2)^{1000}}")
SLOW_POWER = ("9^{9^{8}}", "\\boxed{3^{9^{8}}}")


def test_timeout_kills_hung_items_and_pool_recovers():
    items = [("1", "\\boxed{1}"), SLOW_SIMPLIFY, ("2", "\\boxed{2}"), SLOW_POWER, ("3", "\\boxed{4}"), ("4", "#### 4")]
    t0 = time.perf_counter()
    grades = grade_math_batch(items, timeout_s=1.0, workers=2)
    elapsed = time.perf_counter() - t0
    assert [g.status for g in grades] == ["correct", "timeout", "correct", "timeout", "wrong", "correct"]
    assert "longer than 1 s" in grades[1].detail
    assert elapsed < 30, elapsed  # two 1 s limits + worker restarts, not minutes
    # the pool serves the next batch normally
    again = grade_math_batch([("5", "\\boxed{5}"), ("6", "\\boxed{7}")], timeout_s=5.0, workers=2)
    assert [g.status for g in again] == ["correct", "wrong"]


def test_batch_results_are_in_order():
    items = [(str(i), f"so \\boxed{{{i if i % 3 else i + 1}}}") for i in range(300)]
    grades = grade_math_batch(items, timeout_s=10.0)
    assert [g.correct for g in grades] == [bool(i % 3) for i in range(300)]
    assert [g.extracted for g in grades] == [str(i if i % 3 else i + 1) for i in range(300)]
    assert grade_math_batch([], timeout_s=1.0) == []


def test_grading_from_a_thread():
    # math-verify's own signal.alarm timeouts fail outside the main thread; ours do not.
    out: list = []
    th = threading.Thread(target=lambda: out.append(grade_math("\\frac{1}{2}", "\\boxed{0.5}", timeout_s=10.0)))
    th.start()
    th.join(60)
    assert out and out[0].correct


def test_bad_arguments():
    with pytest.raises(ValueError):
        grade_math_batch([("1", "1")], timeout_s=0)
    with pytest.raises(ValueError):
        grade_math_batch([("1", "1")], order=("nope",))
    assert DEFAULT_ORDER[0] == "answer_tag"


# --------------------------------------------------------------------------------------------
# acceptance criteria on the real benchmark files (full sets)
# --------------------------------------------------------------------------------------------


def _accuracy(pairs: list[tuple[str, str]]) -> tuple[float, list]:
    grades = grade_math_batch(pairs, timeout_s=10.0)
    bad = [(p, g) for p, g in zip(pairs, grades) if not g.correct]
    return 1 - len(bad) / len(pairs), bad


@pytest.mark.slow
def test_math500_gold_solutions_grade_correct(bench_dir):
    qs = load_benchmark("math500", data_dir=bench_dir)
    assert len(qs) == 500
    acc, bad = _accuracy([(q.answer, q.meta["solution"]) for q in qs])
    assert acc >= 0.99, bad[:10]


@pytest.mark.slow
def test_olympiadbench_final_answers_grade_correct(bench_dir):
    qs = load_benchmark("olympiadbench", data_dir=bench_dir)
    assert len(qs) == 675
    acc, bad = _accuracy([(q.answer, ", ".join(q.meta["final_answer"])) for q in qs])
    assert acc >= 0.98, bad[:10]


@pytest.mark.slow
def test_olympiadbench_final_answers_in_its_own_format_all_grade_correct(bench_dir):
    """OlympiadBench's answer format, several answers as ``$a$,$b$`` after "The final answer is"."""
    qs = load_benchmark("olympiadbench", data_dir=bench_dir)
    acc, bad = _accuracy([(q.answer, "The final answer is " + ", ".join(q.meta["final_answer"])) for q in qs])
    assert not bad, bad[:10]


_INT = re.compile(r"(?<![\d.])\d+(?![\d.])")
_NUM = re.compile(r"^-?\d+(?:\.\d+)?$")
_FRAC = re.compile(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}")


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def mutations(gold: str) -> list[tuple[str, str]]:
    """Wrong answers made from a gold answer: off by one (last integer literal outside a unit),
    sign flip (plain nonzero numbers), another fraction (a/b -> b/a or a/(b+1)), a dropped
    element (tuples, sets, intervals, bare lists)."""
    g = gold.strip().strip("$").strip()
    out = []
    core = re.split(r"\\(?:mbox|text)\{", g)[0]
    ms = list(_INT.finditer(core))
    if ms:
        m = ms[-1]
        out.append(("off_by_one", g[: m.start()] + str(int(m.group()) + 1) + g[m.end():]))
    plain = g.replace(",", "")
    if _NUM.match(plain) and float(plain) != 0:
        out.append(("sign_flip", plain[1:] if plain.startswith("-") else "-" + plain))
    fm = _FRAC.search(g)
    if fm:
        a, b = int(fm.group(1)), int(fm.group(2))
        repl = f"\\frac{{{b}}}{{{a}}}" if a not in (b, -b, 0) else f"\\frac{{{a}}}{{{b + 1}}}"
        out.append(("other_fraction", g[: fm.start()] + repl + g[fm.end():]))
    inner, wrap = g, ("", "")
    for left, right in (("\\left(", "\\right)"), ("(", ")"), ("\\{", "\\}"), ("[", "]")):
        if g.startswith(left) and g.endswith(right):
            inner, wrap = g[len(left): -len(right)], (left, right)
            break
    parts = _split_top(inner)
    if len(parts) >= 2:
        out.append(("drop_element", wrap[0] + ",".join(parts[:-1]) + wrap[1]))
    return out


@pytest.mark.slow
def test_mutated_gold_answers_are_rejected(bench_dir):
    items = []
    for name in ("gsm8k", "math500", "olympiadbench"):
        for q in load_benchmark(name, data_dir=bench_dir):
            for kind, wrong in mutations(q.answer):
                items.append((name, kind, q.answer, wrong))
    kinds = {k for _, k, _, _ in items}
    assert kinds == {"off_by_one", "sign_flip", "other_fraction", "drop_element"}
    assert len(items) > 4000
    for form in ("The final answer is $\\boxed{{{}}}$.", "The final answer is ${}$"):
        grades = grade_math_batch([(g, form.format(w)) for _, _, g, w in items], timeout_s=10.0)
        accepted = [it for it, gr in zip(items, grades) if gr.correct]
        assert not accepted, (form, accepted[:20])


def test_no_grading_process_outlives_a_killed_caller(tmp_path):
    """SIGKILL the caller while a worker is stuck in C code: the zygote sees EOF on its control
    socket and kills its workers (which also die with it via PR_SET_PDEATHSIG)."""
    import os
    import signal
    import subprocess
    import sys

    import psutil

    script = (
        "from selfevolve.verifiers.math import grade_math_batch\n"
        f"grade_math_batch([{SLOW_POWER!r}], timeout_s=600.0, workers=1)\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", script], cwd=str(tmp_path),
                              env={**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[1])})
    try:
        deadline = time.time() + 60
        spawned: list = []
        while time.time() < deadline and len(spawned) < 2:  # the zygote and its worker
            time.sleep(0.1)
            spawned = psutil.Process(caller.pid).children(recursive=True)
        assert len(spawned) >= 2, "the grading worker never started"
        time.sleep(1.0)  # the worker is now inside the never-ending comparison
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait(10)
    gone, alive = psutil.wait_procs(spawned, timeout=15)
    assert not alive, [p.cmdline()[:3] for p in alive]
