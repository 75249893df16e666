"""Answer forcing (s1's budget forcing): which completions are forced, what the model is asked to
continue, and that a backend continues a trailing assistant message instead of starting a new one."""

from __future__ import annotations

import pytest

from selfevolve.backends.base import Backend, Completion
from selfevolve.records import CodeSpec, MathSpec, Question
from selfevolve.roles.forcing import force_answers, force_missing_answers, forced_prefix
from selfevolve.stages.challenge import part_missing


class Recorder(Backend):
    """Answers every conversation with ``reply`` and keeps what it was asked."""

    def __init__(self, reply: str = "42</answer> and more"):
        self.reply, self.calls = reply, []

    def chat(self, conversations, sampling):
        self.calls.append((conversations, sampling))
        return [[Completion(text=self.reply)] * sampling.n for _ in conversations]


@pytest.mark.parametrize("text, prefix", [
    ("<think>12 * 3 = 36, 36 * 3 = 108, 108 * 3", "<think>12 * 3 = 36, 36 * 3 = 108, 108 * 3\n</think>\n<answer>"),
    ("<think>done</think> so the total is", "<think>done</think> so the total is\n<answer>"),
    ("To solve this, we first ", "To solve this, we first\n<answer>"),
    ("<question>Q?</question><answer>1", "<question>Q?</question><answer>1"),  # inside an open answer: continue it
])
def test_forced_prefix_closes_the_thinking_and_opens_the_answer(text, prefix):
    assert forced_prefix(text) == prefix


def test_force_answers_continues_the_reply_greedily_until_the_answer_closes():
    b = Recorder()
    conv = [{"role": "user", "content": "What is 6 * 7?"}]
    out = force_answers(b, [conv], ["<think>6 * 7 is 6 + 6 +"], 16, seed=3)
    assert out == ["<think>6 * 7 is 6 + 6 +\n</think>\n<answer>42</answer>"]
    (convs, sampling), = b.calls
    assert convs[0][:-1] == conv and convs[0][-1] == {"role": "assistant", "content": "<think>6 * 7 is 6 + 6 +\n</think>\n<answer>"}
    assert sampling.temperature == 0 and sampling.max_new_tokens == 16 and sampling.stop == ["</answer>"]
    assert force_answers(b, [], [], 16) == [] and len(b.calls) == 1


def test_only_math_completions_without_an_answer_are_forced():
    math_q = Question(id="m", text="What is 6 * 7?", domain="math", spec=MathSpec(answer="42"))
    code_q = Question(id="c", text="Write f.", domain="code", spec=CodeSpec(tests=["assert f() == 1"]))
    comps = [[Completion(text="<think>6 * 7 = ", finish_reason="length"),       # forced
              Completion(text="<answer>42</answer>", finish_reason="stop"),     # answered
              Completion(text="The answer is 42", finish_reason="length"),     # parsed without tags: not forced
              Completion(text="So 6 bars are left.", finish_reason="stop")],   # a conclusion in prose: forced
             [Completion(text="def f(", finish_reason="length")]]               # code: not forced
    convs = [[{"role": "user", "content": "q1"}], [{"role": "user", "content": "q2"}]]
    b = Recorder()
    assert force_missing_answers(b, [math_q, code_q], convs, comps, 0) == [[0, 0, 0, 0], [0]] and not b.calls
    flags = force_missing_answers(b, [math_q, code_q], convs, comps, 8)
    assert flags == [[1, 0, 0, 1], [0]]
    assert comps[0][0].text.endswith("<answer>42</answer>") and comps[0][0].finish_reason == "length"
    assert comps[0][1].text == "<answer>42</answer>" and comps[1][0].text == "def f("


def test_the_challenger_is_forced_only_for_a_math_question_without_its_answer():
    ref_m = Question(id="r", text="Compute 1 + 1.", domain="math", spec=MathSpec(answer="2"))
    ref_c = Question(id="rc", text="Write f.", domain="code", spec=CodeSpec(tests=["assert f() == 1"]))
    texts = ["<question>What is 2 + 3?</answer>", "<question>What is 2 + 3?</question><answer>5</answer>",
             "nothing", "<question>Write g.</question>"]
    assert part_missing(texts, [ref_m, ref_m, ref_m, ref_c], "answer") == [0]


def test_a_trailing_assistant_message_is_continued_not_answered(tiny_model_dir):
    from transformers import AutoTokenizer

    from selfevolve.backends.hf import render_prompt

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    user = [{"role": "user", "content": "Compute 1 + 2."}]
    fresh = render_prompt(tok, user)
    cont = render_prompt(tok, user + [{"role": "assistant", "content": "<think>1 + 2 = 3</think>\n<answer>"}])
    assert cont.startswith(fresh) and cont.endswith("<think>1 + 2 = 3</think>\n<answer>")
    tok.chat_template = None
    assert render_prompt(tok, user + [{"role": "assistant", "content": "<answer>"}]).endswith("assistant: <answer>")


def test_a_code_challenger_is_forced_to_write_its_tests_then_its_reference_solution():
    ref = Question(id="rc", text="Write f.", domain="code", spec=CodeSpec(tests=["assert f() == 1"]))
    texts = ["<question>Write g(x) returning x + 1.</question>",                                      # needs tests, then code
             "<question>Write g.</question>\n<tests>\nassert g(1) == 2\n</tests>",                      # needs code
             "<question>Write g.</question><tests>assert g(1) == 2</tests><code>def g(x):\n    return x + 1</code>",  # complete
             "def g(x): return x"]                                                                      # no question
    refs = [ref] * 4
    assert part_missing(texts, refs, "tests") == [0] and part_missing(texts, refs, "code") == [1]
    b = Recorder("assert g(1) == 2\n</tests> trailing")
    texts[0] = force_answers(b, [[{"role": "user", "content": "q"}]], [texts[0]], 32, tag="tests")[0]
    assert texts[0].endswith("<tests>assert g(1) == 2</tests>") and b.calls[0][1].stop == ["</tests>"]
    assert part_missing(texts, refs, "code") == [0, 1]
