"""Role templates render; tolerant parsers never raise and give the documented format rewards."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selfevolve.roles import parsers
from selfevolve.roles.templates import ROLES, messages, render

PIECES = list("<>/ab1 \n.-") + ["<think>", "</think>", "<answer>", "</answer>", "<score>", "</score>", "<plan>", "</plan>", "<question>",
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
    assert parsers.well_formed_solver(text) in (True, False)


@pytest.mark.parametrize("text, ok", [
    ("<think>2 + 3 = 5</think><answer>5</answer>", True),
    ("  <think>2 + 3 = 5</think>\n<answer>5</answer>\n", True),
    ("<think>if a < b: swap</think><answer>5</answer>", True),     # a comparison is not a tag
    ("<answer>5</answer>", False),                                   # no working
    ("<think>2 + 3</think><answer> </answer>", False),               # empty answer
    ("<think>x</think><think>y</think><answer>5</answer>", False),
    ("<answer>5</answer><think>x</think>", False),
    ("<remember>2 + 3 = 5</remember><answer>5</answer>", False),
    ("<think>2 + 3 = 5 <b>sure</b></think><answer>5</answer>", False),
    ("Sure.\n<think>2 + 3 = 5</think><answer>5</answer>", False),
    ("<think>2 + 3 = 5</think><answer>5</answer> Done.", False),
    ("<think>2 + 3 = 5</think><answer>5", False),
    (None, False),
])
def test_well_formed_solver_is_the_prompts_format_exactly(text, ok):
    assert parsers.well_formed_solver(text) is ok


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


@pytest.mark.parametrize("text, question, answer", [
    # a reference item is shown as "question Answer: value": a Challenger that copies the form must not hand
    # the Solver the answer inside the question
    ("<question>Compute 50 + 1. Answer: 51</question>", "Compute 50 + 1.", "51"),
    ("<question>Compute 50 + 1. answer: 51</question>\n<answer>51</answer>", "Compute 50 + 1.", "51"),
    ("<question>Compute 50 + 1. Answer: 51</question><answer>52</answer>", "Compute 50 + 1.", "52"),
    ("<question>What is the answer to 3 + 4?</question><answer>7</answer>", "What is the answer to 3 + 4?", "7"),
])
def test_challenger_question_never_states_its_answer(text, question, answer):
    out = parsers.parse_challenger(text)
    assert out.question == question and out.answer == answer and out.ok


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


# Real completions of SmolLM2-135M-Instruct (greedy, GSM8K test questions), with and without worked examples.
@pytest.mark.parametrize("text, answer, r_f", [
    ("1. 2 bolts of blue fiber = 2 * 2 = 4 bolts\n2. 1 bolt of blue fiber = 1 * 2 = 2 bolts\n\nThe answer is 3.", "3", 0.5),
    ("<think>2 bolts of blue fiber is 2 * 2 = 4 bolts. Half of that is 2 * 2 = 4 bolts.</think><answer>4</answer>", "4", 1.0),
    ("So, James decides to run 40 meters a week.\n#### 40\nThe answer is: 40", "40", 0.5),
    ("Each glass costs $5, so the total is \\boxed{80} dollars.", "80", 0.5),
    ("To solve this problem, we need to break it down into manageable parts. First, we need to calculate", None, 0.0),
])
def test_solver_reads_untagged_final_answers(text, answer, r_f):
    out = parsers.parse_solver(text)
    assert out.answer == answer and out.format_reward == r_f


def test_solver_code_without_tags_takes_the_last_fenced_block():
    out = parsers.parse_solver("Here:\n```python\ndef f():\n    return 0\n```\nBetter:\n```python\ndef f():\n    return 1\n```", "code")
    assert out.answer == "def f():\n    return 1" and out.format_reward == 0.5


@pytest.mark.parametrize("text, raw, r_f", [
    ("<score>12</score>", None, 0.5),             # real: out of range is unparsed, not clipped
    ("<score>15.5</score>", None, 0.5),
    ("The plan is correct and useful.", None, 0.0),   # real: a verdict without a number
    ("Score: 7", 7.0, 0.5),
    ("I would rate this problem 8 out of 10 for clarity.", 8.0, 0.5),
    ("Rating: **6/10**", 6.0, 0.5),
    ("seven out of ten", 7.0, 0.5),
    ("<score>Eight</score>", 8.0, 1.0),
    ("The problem has 3 steps and 12 apples.", None, 0.0),  # numbers that are not a score
])
def test_critic_reads_scores_written_as_numbers_or_words(text, raw, r_f):
    out = parsers.parse_score(text)
    assert out.raw == raw and out.format_reward == r_f
    if raw is None:
        assert out.score == 0.5  # unparsed: counts as critic_unparseable_score in rewards, and passes no gate


@pytest.mark.parametrize("text, question, answer, r_f", [
    # real: the closing tag is wrong -> the question is read, but there is no answer
    ("<question>Sara runs 100 meters a week. She runs 3 sprints a week. How many total meters does she run a week?</answer>",
     "Sara runs 100 meters a week. She runs 3 sprints a week. How many total meters does she run a week?", None, 0.0),
    ("<question>Sara has 30 more socks than Emma. Emma has 3. How many socks does Sara have?</answer>\n<answer>33</answer>",
     "Sara has 30 more socks than Emma. Emma has 3. How many socks does Sara have?", "33", 0.5),
    ("<question>Compute 3 + 4.</question><answer>7", "Compute 3 + 4.", "7", 0.5),  # unclosed answer: maybe cut off
    ("**Question:** Sara has 5 bags with 2 marbles each. How many marbles?\n**Answer:** 10",
     "Sara has 5 bags with 2 marbles each. How many marbles?", "10", 0.5),
    ("### New Problem\nWhat is 2 + 3 * 4?\n### Solution\nMultiply first: 3 * 4 = 12, then \\boxed{14}.", "What is 2 + 3 * 4?", "14", 0.5),
    ("Problem: How many legs do 3 cats have?\nSolution: Each cat has 4 legs, so 3 * 4 = 12.\nThe answer is 12.",
     "How many legs do 3 cats have?", "12", 0.5),
    ("Question: What is 7 * 8?", "What is 7 * 8?", None, 0.25),
    ("A little harder:\n\nA little harder:", None, None, 0.0),   # real: nothing to read
])
def test_challenger_reads_questions_under_headings(text, question, answer, r_f):
    out = parsers.parse_challenger(text)
    assert (out.question, out.answer, out.format_reward) == (question, answer, r_f)
    assert out.ok == bool(question and answer and "<answer>7" not in text)


def test_challenger_code_accepts_a_singular_test_tag():
    # real: <test> for <tests>
    out = parsers.parse_challenger("<question>Write odd(n).</question>\n<test>\nassert odd(1) == True\n</test>\n"
                                   "<code>def odd(n):\n    return n % 2 == 1</code>", "code")
    assert out.ok and out.tests == ["assert odd(1) == True"] and out.format_reward == 1.0


def test_plan_without_tags_needs_numbered_steps():
    out = parsers.parse_plan("Here is a plan:\n1. Multiply the boxes by the apples.\n**Step 2:** Subtract the eaten apples.")
    assert out.steps == ["Multiply the boxes by the apples.", "Subtract the eaten apples."] and out.format_reward == 0.5
    # real: prose with one numbered line is not a plan
    assert parsers.parse_plan("To solve this, we first find the total.\n1. 16 * 3 = 48 eggs.").steps == []
    assert parsers.parse_plan("<plan>2. Calculate the total distance he runs a week.</plan>").format_reward == 1.0


def test_worked_examples_precede_the_prompt_in_the_role_format():
    from selfevolve.roles.templates import worked_examples

    for role in ROLES:
        for domain in ("math", "code"):
            conv = messages(role, True, question="Q?", plan="1. x", domain=domain, reference="R?")
            assert conv[-1] == messages(role, question="Q?", plan="1. x", domain=domain, reference="R?")[0]
            turns = conv[:-1]
            assert turns and [t["role"] for t in turns] == ["user", "assistant"] * (len(turns) // 2)
            for t in turns[1::2]:  # every example reply is what the role's parser reads in full
                if role == "solver":
                    assert parsers.parse_solver(t["content"], domain).format_reward == 1.0
                elif role == "planner":
                    assert parsers.parse_plan(t["content"]).format_reward == 1.0
                elif role.startswith("critic"):
                    assert parsers.parse_score(t["content"]).format_reward == 1.0
                else:
                    assert parsers.parse_challenger(t["content"], domain).ok
    assert worked_examples("critic_plan") != [] and messages("solver", question="Q", domain="math", plan=None)[0]["role"] == "user"
