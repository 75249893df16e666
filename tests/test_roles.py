"""Role templates render; tolerant parsers never raise and give the documented format rewards."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selfevolve.roles import parsers
from selfevolve.roles.templates import ROLES, messages, render

PIECES = list("<>/ab1 \n.-") + ["<answer>", "</answer>", "<score>", "</score>", "<plan>", "</plan>", "<question>",
                                 "</question>", "<tests>", "</tests>", "<code>", "</code>", "```", "assert ", "10", "7.5"]
TAGGY = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), TAGGY, st.none(), st.integers(), st.binary(max_size=20)))
def test_parsers_never_raise(text):
    for domain in ("math", "code"):
        out = parsers.parse_challenger(text, domain)
        assert 0.0 <= out.format_reward <= 1.0
        s = parsers.parse_solver(text, domain)
        assert 0.0 <= s.format_reward <= 1.0
    p = parsers.parse_plan(text)
    assert 0.0 <= p.format_reward <= 1.0
    sc = parsers.parse_score(text)
    assert 0.0 <= sc.score <= 1.0 and 0.0 <= sc.format_reward <= 1.0


@pytest.mark.parametrize("text, raw, score, r_f", [
    ("<score>10</score>", 10.0, 1.0, 1.0),
    ("<score>1</score>", 1.0, 1.0, 1.0),       # s in [0,1] stays
    ("<score>0.4</score>", 0.4, 0.4, 1.0),
    ("<score>7</score>", 7.0, 6 / 9, 1.0),      # (s-1)/9
    ("<score>7/10</score>", 7.0, 6 / 9, 1.0),
    ("<score>4", 4.0, 3 / 9, 0.5),              # unclosed
    ("<score>eleven</score>", None, 0.5, 0.5),  # unparseable -> 0.5
    ("<score>42</score>", None, 0.5, 0.5),      # out of range -> unparseable
    ("no tag at all", None, 0.5, 0.0),
])
def test_critic_score_normalisation(text, raw, score, r_f):
    out = parsers.parse_score(text)
    assert out.raw == raw and out.score == pytest.approx(score) and out.format_reward == r_f


def test_challenger_math_and_code():
    out = parsers.parse_challenger("<question>Compute 3 + 4.</question><think>x</think><answer>7</answer>")
    assert out.ok and out.question == "Compute 3 + 4." and out.answer == "7" and out.format_reward == 1.0
    half = parsers.parse_challenger("<question>Compute 3 + 4.</question> no answer")
    assert not half.ok and half.format_reward == 0.5 and "<answer>" in half.error
    code = parsers.parse_challenger("<question>Write f</question><tests>assert f(1) == 2\nassert f(2) == 3</tests>"
                                    "<code>```python\ndef f(x):\n    return x + 1\n```</code>", "code")
    assert code.ok and code.tests == ["assert f(1) == 2", "assert f(2) == 3"]
    assert code.reference_solution.startswith("def f(x):")


def test_plan_and_solver():
    p = parsers.parse_plan("<plan>1. add the ones 2. carry 3. read</plan>")
    assert p.steps == ["add the ones", "carry", "read"] and p.format_reward == 1.0
    assert parsers.parse_plan("<plan></plan>").format_reward == 0.5
    s = parsers.parse_solver("<think>7+5</think><answer> 12 </answer>")
    assert s.answer == "12" and s.format_reward == 1.0
    assert parsers.parse_solver("<answer>12").format_reward == 0.5
    assert parsers.parse_solver("<answer>```python\ndef f(x):\n    return 1\n```</answer>", "code").answer.startswith("def f")


def test_templates_render_every_role():
    fields = dict(question="Compute 1 + 2.", plan="1. add", domain="math", reference="Compute 1 + 1. Answer: 2")
    for role in ROLES:
        text = render(role, **fields)
        assert text and "{{" not in text
    assert messages("solver", question="Q", domain="math", plan=None)[0]["content"].count("Plan:") == 0
    assert "Plan: 1. add" in render("solver", question="Q", domain="math", plan="1. add")
    with pytest.raises(KeyError):
        render("oracle")
