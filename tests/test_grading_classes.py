"""Classes of answers that plain math-verify (and the grader built on it) judged wrongly: every
reported input, and more inputs of each class, graded through ``grade_math_batch`` in one batch.
Also: the spec check rejects a reference answer that parses only partly, a sandbox job without any
test is an error, never a pass, and the new string code never raises or hangs on untrusted text.

Each case is (gold, prediction text, expected status). The comments name what the old grader did.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfevolve.records import CodeSpec, MathSpec, Question
from selfevolve.verifiers.math import DEFAULT_ORDER, grade_math_batch, validate_math_answer, validate_math_answers
from selfevolve.verifiers.math_extract import extract_final_answer, unbalanced
from selfevolve.verifiers.math_normalize import normalize_answer, split_conditions

CASES: dict[str, list[tuple[str, str, str]]] = {
    # exact values were compared with an absolute float tolerance (all tiny values were equal)
    "exact_values": [
        (r"\frac{1}{20!}", r"\boxed{\frac{1}{21!}}", "wrong"),  # reported
        (r"\frac{3^{40}+1}{2 \cdot 3^{41}}", r"\boxed{\frac{1}{2 \cdot 3^{41}}}", "wrong"),  # reported
        (r"\frac{1}{100!}", r"\boxed{\frac{1}{101!}}", "wrong"),
        (r"\frac{\pi}{10^{20}}", r"\boxed{\frac{\pi}{10^{21}}}", "wrong"),
        (r"e^{-40}", r"\boxed{e^{-41}}", "wrong"),
        ("0.0000001", r"\boxed{0.0000002}", "wrong"),  # decimals: the tolerance is relative
        # where math-verify was right it stays right
        (r"\frac{1}{20!}", r"\boxed{\frac{21}{21!}}", "correct"),
        (r"\sqrt{2}+\sqrt{3}", r"\boxed{\sqrt{5+2\sqrt{6}}}", "correct"),
        (r"\frac{\sqrt{2}}{2}", r"\boxed{0.707107}", "correct"),
        (r"\frac{1}{3}", r"\boxed{0.333333}", "correct"),
        (r"1.5 \times 10^{-9}", r"\boxed{1.5 \cdot 10^{-9}}", "correct"),
    ],
    # a fallback parse read only a leading number of an answer it could not parse
    "partial_parse": [
        (r"1-\mathrm{e}", r"\boxed{1+\mathrm{e}}", "wrong"),  # reported
        ("2", r"\boxed{2\sqrt(2)}", "wrong"),  # reported
        ("5", r"\boxed{5 \cdot \mathrm{e}}", "wrong"),
        (r"2\sqrt{2}", r"\boxed{2\sqrt(2)}", "correct"),  # read as a whole, it is right
        (r"1-\mathrm{e}", r"\boxed{1-e}", "correct"),
    ],
    # a symbol was dropped (math-verify's unit stripping, a fraction found inside) and a number kept
    "symbol_dropped": [
        (r"\frac{1}{2}E_{1}", r"\boxed{\frac{1}{2}}", "wrong"),  # reported
        ("2t", r"\boxed{2}", "wrong"),
        ("n+2m", r"\boxed{n+2}", "wrong"),
        (r"2\mathrm{e}", r"\boxed{2}", "wrong"),
        (r"10\text{ cm}", r"\boxed{10}", "correct"),  # a unit is still a unit
    ],
    # Unicode minus signs (and other Unicode math signs) were lost or not understood
    "unicode_signs": [
        ("3", "It fell to −3.", "wrong"),  # reported (U+2212)
        ("-3", "It fell to −3.", "correct"),
        ("-5", r"\boxed{–5}", "correct"),  # en dash
        (r"2 \times 3^{2}", r"\boxed{2×3²}", "correct"),
        (r"\sqrt{12}", r"\boxed{√12}", "correct"),
        (r"2 \cdot 3", r"\boxed{2·3}", "correct"),
        ("6", r"\boxed{2·3}", "wrong"),  # a numeral gold wants the value, not the product restated
    ],
    # several boxes: only the last was kept; they are the answers when the gold is a list
    "several_boxes": [
        ("2, 5", r"The roots are \boxed{2} and \boxed{5}.", "correct"),  # reported
        ("2, 5", r"$x = \boxed{2}$ or $x = \boxed{5}$", "correct"),
        ("(1,2), (3,4)", r"The points are $\boxed{(1,2)}$ and $\boxed{(3,4)}$.", "correct"),
        ("-2, -2", r"$a = \boxed{-2}$ and $b = \boxed{-2}$", "correct"),
        ("2, 5", r"\boxed{2}, \boxed{5}, \boxed{7}", "wrong"),
        ("2, 5", r"We get \boxed{2}.", "wrong"),
        ("5", r"First \boxed{3}, then the answer \boxed{5}.", "correct"),
    ],
    # a truncated or unbalanced final answer was accepted
    "truncated": [
        ("12", r"so the answer is \boxed{12", "no_answer"),  # reported
        ("5", r"\boxed{5} and finally \boxed{", "no_answer"),
        ("7", r"<answer>\boxed{7", "no_answer"),
        (r"\frac{3}{4}", r"The final answer is $\frac{3}{4", "no_answer"),
        ("(1, 2)", "<answer>(1, 2", "no_answer"),
        ("5", r"\boxed{ \boxed{5}", "no_answer"),
    ],
    # several $...$ after "the final answer is" (OlympiadBench's format): only the first was kept
    "final_answer_list": [
        ("8, 4", "The final answer is $8$,$4$", "correct"),  # reported
        ("f(n)=n, g(n)=1", "The final answer is $f(n)=n$, $g(n)=1$", "correct"),
        ("2, 3", "The final answer is $2$ and $3$.", "correct"),
        ("8", "The final answer is $8$, $4$", "wrong"),  # an extra answer is not ignored
        ("1, 2, 3", "The final answer is $1$, $2$", "wrong"),
    ],
    # a condition or quantifier was ignored
    "conditions": [
        ("g(t) = 0", r"\boxed{\forall t>1, g(t) = 0}", "wrong"),  # reported
        ("x=2", r"\boxed{x = 2 \quad \forall n}", "wrong"),
        ("0", r"\boxed{0 \text{ if } n \text{ odd}}", "wrong"),
        (r"\forall t>1, g(t) = 0", r"\boxed{\exists t>1, g(t) = 0}", "wrong"),
        (r"g(t)=0 \text{ for all } t>1", r"\boxed{g(t)=0}", "wrong"),
        (r"g(t)=0 \text{ for all } t>1", r"\boxed{g(t)=0 \text{ for all } t>2}", "wrong"),
        (r"g(t)=0 \text{ for all } t>1", r"\boxed{\forall t>1, g(t)=0}", "correct"),
        (r"g(t)=0 \text{ for all } t>1", r"\boxed{g(t)=0 \text{ for all } 1<t}", "correct"),
        ("5", "The answer is 5 if we count from zero.", "correct"),  # prose, not a condition in maths
    ],
}
ITEMS = [(cls, g, p, want) for cls, cases in CASES.items() for g, p, want in cases]


@pytest.fixture(scope="module")
def grades():
    return grade_math_batch([(g, p) for _, g, p, _ in ITEMS], timeout_s=20.0)


@pytest.mark.parametrize("i", range(len(ITEMS)), ids=[f"{c}-{k}" for c, cases in CASES.items() for k in range(len(cases))])
def test_grading_class(grades, i):
    cls, gold, pred, want = ITEMS[i]
    got = grades[i]
    assert got.status == want, f"{cls}: gold={gold!r} prediction={pred!r}: {got}"


def test_each_class_has_more_than_the_reported_input():
    assert all(len(cases) >= 3 for cases in CASES.values())


# ----------------------------------------------------------------------------- the spec check


def test_spec_check_rejects_a_partly_parseable_reference():
    from selfevolve.config import VerifierParams
    from selfevolve.verifiers.spec import validate_specs_batch

    partly = [r"\frac{1}{2}E_{1}", r"\frac{1}{2", r"1-\mathrm{x}+"]
    for answer, (ok, reason) in zip(partly, validate_math_answers(partly)):
        assert not ok and reason.startswith("reference answer"), (answer, reason)
    whole = [r"1-\mathrm{e}", r"\frac{1}{2}", r"2\sqrt(2)"]
    assert [ok for ok, _ in validate_math_answers(whole)] == [True, True, True]
    qs = [Question(id=str(i), domain="math", text="Find it.", spec=MathSpec(answer=a), source="challenger")
          for i, a in enumerate(partly + whole)]
    checks = validate_specs_batch(qs, VerifierParams().banned_modules)
    assert [c.valid for c in checks] == [False] * len(partly) + [True] * len(whole), checks
    assert not validate_math_answer(r"\frac{1}{2}E_{1}")[0]


# ----------------------------------------------------------------------------- the sandbox


def test_code_job_without_tests_is_an_error(pool):
    from selfevolve.verifiers.sandbox import NO_TESTS_DETAIL, CodeJob
    from selfevolve.verifiers.spec import validate_spec

    res = pool.run(CodeJob(program="def f():\n    return 1\n"))
    assert res.status == "error" and not res.passed and res.detail == NO_TESTS_DETAIL
    assert res.pass_fraction == 0.0
    batch = pool.run_batch([CodeJob(program="x = 1\n"), CodeJob(program="x = 1\n", tests=["assert x == 1"])], workers=2)
    assert [r.status for r in batch] == ["error", "passed"]
    q = Question(id="c", domain="code", text="Write f.", source="challenger",
                 spec=CodeSpec(reference_solution="def f():\n    return 1\n", tests=[]))
    check = validate_spec(q, [], pool=pool)
    assert not check.valid and "no tests" in check.reason


# ----------------------------------------------------------------------------- untrusted text

_PIECES = st.sampled_from(
    ["\\boxed{", "}", "{", "$", "$$", ",", " and ", "\\forall ", "\\exists ", " for all ", " if ", "\\text{ for }",
     "\\text{ cm}", "−", "–", "×", "√", "²", "\\sqrt(", "(", ")", "[", "\\left(", "\\right)", "The final answer is ",
     "<answer>", "</answer>", "1", "-2", "x", "=", ">", "\\frac{1}{", "\\quad", "\\,", "%", "°", " ", "\n"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=40).map("".join), st.integers(1, 4))
def test_extraction_and_splitting_never_raise(text, arity):
    got = extract_final_answer(text, DEFAULT_ORDER, arity)
    assert got is None or (isinstance(got, str) and got == got.strip() and got and not unbalanced(got))
    for s in (text, got or ""):
        norm = normalize_answer(s)
        main, conds = split_conditions(norm)
        assert isinstance(main, str) and all(isinstance(k, str) and isinstance(c, str) for k, c in conds)


@pytest.mark.parametrize("text", [
    "1" + " " * 200_000 + "2",  # normalisation was quadratic in a run of spaces
    "\\boxed{1" + " " * 200_000 + "2}",
    "<answer>$1$," + " " * 200_000 + "x</answer>",
    "<answer>x" + " for" * 50_000 + "</answer>",
    "<answer>x for y" + "\\quad" * 40_000 + "</answer>",
    "\\boxed{" + "\\sqrt(" * 30_000 + "}",
    "<answer>" + "$a$ " * 50_000 + "</answer>",
    "\u2212" * 200_000 + "√" * 100_000,
])
def test_pathological_text_is_fast(text):
    t0 = time.perf_counter()
    got = extract_final_answer(text, DEFAULT_ORDER, 3)
    normalize_answer(got or "")
    normalize_answer(text)
    split_conditions(normalize_answer(text))
    assert time.perf_counter() - t0 < 5.0
