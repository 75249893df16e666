"""The pieces of a cycle's stages that decide what counts: where a question's reference comes from,
when a pseudo-label stands, how held-out results split into seed forms and frontier, and which
validation questions a check uses."""

from __future__ import annotations

import pytest

from selfevolve.records import ChallengerRollout, MathSpec, Question
from selfevolve.roles.parsers import parse_challenger
from selfevolve.stages.challenge import challenger_question
from selfevolve.stages.evaluate import split_metrics
from selfevolve.stages.rewards import spec_holds

PARENT = Question(id="p", domain="math", text="Compute 123 + 45.", spec=MathSpec(answer="168"), level=3)


def _question(completion: str):
    return challenger_question(parse_challenger(completion, "math"), "c1-q0", PARENT, 1)


def test_an_arithmetic_question_takes_its_reference_from_the_environment():
    q = _question("<question>Compute 4821 + 372.</question><answer>5000</answer>")  # the Challenger's answer is wrong
    assert q.spec.answer == "5193" and q.reference == "environment"
    assert q.meta["challenger_answer"] == "5000" and q.answer_agrees is False
    assert q.form == "4+3" and q.level == 4
    # its answer is only scored: without one the question still stands
    q = _question("<question>Compute 4821 + 372.</question>")
    assert q is not None and q.spec.answer == "5193"
    assert _question("<question>Compute 12 + 30.</question><answer>42</answer>").answer_agrees is True


def test_a_word_problem_takes_the_challengers_answer_as_a_pseudo_label():
    q = _question("<question>Tom has 3 apples and buys 4. How many now?</question><answer>7</answer>")
    assert q.spec.answer == "7" and q.reference == "challenger"
    assert _question("<question>Tom has 3 apples. How many?</question>") is None  # nothing to check against
    assert _question("no tags") is None


def _rollout(q: Question, valid: bool = True) -> ChallengerRollout:
    return ChallengerRollout(id="c1-ch0", parent_id="p", domain="math", prompt="", completion="", question=q, spec_valid=valid)


@pytest.mark.parametrize("correct, holds", [([1, 1, 0, 0], False), ([1, 1, 1, 0], True), ([], False), ([0, 0], False)])
def test_a_pseudo_label_stands_only_when_the_solver_majority_agrees(correct, holds):
    q = _question("<question>Tom has 3 apples and buys 4. How many now?</question><answer>7</answer>")
    assert spec_holds(_rollout(q), correct) is holds


def test_an_environment_reference_stands_whatever_the_solver_does():
    q = _question("<question>Compute 4821 + 372.</question><answer>1</answer>")
    assert spec_holds(_rollout(q), [0, 0, 0, 0]) and not spec_holds(_rollout(q, valid=False), [1, 1])


def _row(qid: str, split: str, correct: int) -> dict:
    return {"id": qid, "categories": {"split": split, "form": "x"}, "correct": [correct]}


def test_split_metrics_and_mcnemar_against_base():
    base = [_row(f"f{i}", "frontier", 0) for i in range(20)] + [_row(f"s{i}", "seed", 1) for i in range(20)]
    now = [_row(f"f{i}", "frontier", int(i < 12)) for i in range(20)] + [_row(f"s{i}", "seed", int(i != 0)) for i in range(20)]
    m = split_metrics(now, base)
    assert m["heldout_frontier_accuracy"] == 0.6 and m["heldout_frontier_n"] == 20
    assert m["heldout_frontier_gain_vs_base"] == 0.6 and m["heldout_frontier_p_vs_base"] < 0.001  # 12 up, 0 down
    assert m["heldout_seed_accuracy"] == 0.95 and m["heldout_seed_p_vs_base"] == 1.0  # 1 down
    assert "heldout_frontier_p_vs_base" not in split_metrics(now, None)
    assert "heldout_reach_50" not in m  # "x" is no ladder form
    assert "heldout_rungs_accuracy" not in m and not any("_vs_prev" in k for k in m)  # one unsupervised split, no previous cycle


def test_split_metrics_against_the_previous_cycle_and_over_all_rungs():
    """A cycle that holds its predecessor's frontier and moves the rung beyond it: not significant
    against the previous cycle on the frontier, significant on the rungs together."""
    def rows(frontier_right: int, beyond_right: int) -> list[dict]:
        return ([_row(f"f{i}", "frontier", int(i < frontier_right)) for i in range(20)]
                + [_row(f"b{i}", "beyond", int(i < beyond_right)) for i in range(20)] + [_row("s0", "seed", 1)])
    base, prev, now = rows(0, 0), rows(12, 0), rows(13, 12)
    m = split_metrics(now, base, prev)
    assert m["heldout_rungs_accuracy"] == 25 / 40 and m["heldout_rungs_n"] == 40
    assert m["heldout_frontier_gain_vs_prev"] == 0.05 and m["heldout_frontier_p_vs_prev"] == 1.0
    assert m["heldout_beyond_p_vs_prev"] < 0.001 and m["heldout_rungs_gain_vs_prev"] == 13 / 40
    assert m["heldout_rungs_p_vs_prev"] < 0.001 and m["heldout_rungs_gain_vs_base"] == 25 / 40
    assert m["heldout_rungs_p_vs_base"] < m["heldout_rungs_p_vs_prev"]
    assert split_metrics(now, base, base)["heldout_frontier_p_vs_prev"] == m["heldout_frontier_p_vs_base"]


def test_split_metrics_reach_from_the_forms():
    """reach_50 / reach_90: the longest unsupervised sum (operand digits in total) answered right at
    least 50 % / 90 % of the time; seed forms (footholds such as 5+2) do not count."""
    rows = ([{"id": f"a{i}", "categories": {"split": "seed", "form": "5+2"}, "correct": [1]} for i in range(10)]
            + [{"id": f"b{i}", "categories": {"split": "frontier", "form": "4+3"}, "correct": [int(i < 6)]} for i in range(10)]
            + [{"id": f"c{i}", "categories": {"split": "beyond", "form": "5+5"}, "correct": [int(i < 2)]} for i in range(10)])
    m = split_metrics(rows, None)
    assert m["heldout_reach_50"] == 7 and m["heldout_reach_90"] == 0 and m["heldout_beyond_accuracy"] == 0.2
    rows[10:20] = [{"id": f"b{i}", "categories": {"split": "frontier", "form": "4+3"}, "correct": [1]} for i in range(10)]
    assert split_metrics(rows, None)["heldout_reach_90"] == 7
    assert m["heldout_holes"] == 0
    rows += [{"id": f"d{i}", "categories": {"split": "beyond", "form": "4+2"}, "correct": [0]} for i in range(10)]
    assert split_metrics(rows, None)["heldout_holes"] == 1  # 4+2 at 0 under 4+3 at 0.6


def test_ladder_holes_are_forms_failed_below_a_solved_harder_form():
    """seed 0's c2 (docs/measurements.md, "December 7 (night)"): 7+3 and 7+4 at 0 while 8+4 stood at
    0.71; 6+6 at 0.08 is the edge (nothing at or beyond both its operands is solved), not a hole."""
    from selfevolve.questions.arith import ladder_holes

    acc = {"7+3": 0.0, "7+4": 0.0, "8+3": 0.46, "8+4": 0.71, "6+6": 0.08, "6+5": 0.5, "3+3": 1.0, "x": 0.0, "2+2+2": 0.0}
    assert ladder_holes(acc) == {"7+3": "8+4", "7+4": "8+4"}
    assert ladder_holes({**acc, "8+4": 0.49}) == {}  # no harder form at >= 0.5
    assert ladder_holes({**acc, "7+4": 0.11}) == {"7+3": "8+4"}  # above `low`: not a hole
    assert ladder_holes({"4-2": 0.0, "5+3": 1.0}) == {}  # another operator


def test_validation_questions_are_balanced_over_the_splits(tmp_path):
    from selfevolve.config import Params
    from selfevolve.questions import arith
    from selfevolve.records import write_jsonl
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import validation_questions

    qs = arith.generate(30, seed=1, split="seed", prefix="s") + arith.generate(10, seed=2, forms=["4+3"], split="frontier", prefix="f")
    write_jsonl(tmp_path / "data/cycles/base/val.jsonl", qs)
    params = Params()
    params.rl.eval_questions = 20
    picked = validation_questions(StageContext(params, "c1", tmp_path))
    assert [q.split for q in picked].count("seed") == 15 and [q.split for q in picked].count("frontier") == 5
    params.rl.eval_questions = 100
    assert len(validation_questions(StageContext(params, "c1", tmp_path))) == 40


def test_the_validator_hands_checkpoint_selection_each_questions_form(tmp_path):
    """Retention is decided per form: the stage's validation callback carries the form of every
    validation question, in order (``training.rl.retention_flags`` reads them)."""
    from selfevolve.config import Params
    from selfevolve.questions import arith
    from selfevolve.records import write_jsonl
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import validation_questions, validator

    qs = arith.generate(12, seed=1, split="seed", prefix="s") + arith.generate(4, seed=2, forms=["4+3"], split="frontier", prefix="f")
    write_jsonl(tmp_path / "data/cycles/base/val.jsonl", qs)
    ctx = StageContext(Params(), "c1", tmp_path)
    forms = validator(ctx, "train_rl").forms
    assert forms == tuple(q.form for q in validation_questions(ctx)) and forms[-4:] == ("4+3",) * 4


def test_a_trace_follows_a_question_through_the_four_roles_and_the_verifier():
    from selfevolve.records import Attempt, ChallengerRollout, CriticScore, Plan, Rollout, Verdict
    from selfevolve.stages.rewards import sage_traces

    def question(i):
        return Question(id=f"q{i}", domain="math", text=f"Compute {i} + 2.", spec=MathSpec(answer=str(i + 2)), source="challenger")

    challenges = [ChallengerRollout(id=f"ch{i}", parent_id="p", domain="math", prompt="write", completion="...", question=question(i))
                  for i in range(4)]
    q_scores = {f"q{i}": CriticScore(target="question", target_id=f"q{i}", question_id=f"q{i}", completion="<score>8</score>",
                                     raw=8, score=0.78, format_reward=1.0, passed=True) for i in range(4)}
    plans = {"q0": Plan(id="pl0", question_id="q0", completion="<plan>add</plan>", steps=["add"])}
    p_scores = {"q0": CriticScore(target="plan", target_id="pl0", question_id="q0", completion="<score>6</score>", raw=6,
                                  score=0.56, format_reward=1.0, passed=True)}
    attempts = [Attempt(id=f"a{i}{s}", question_id=f"q{i}", sample=s, completion="<answer>2</answer>", answer=str(i + 2 * s))
                for i in (0, 2, 3) for s in range(2)]  # q1 never reached the Solver
    verdicts = {a.id: Verdict(attempt_id=a.id, question_id=a.question_id, correct=float(a.sample == 1), status="ok") for a in attempts}
    rollouts = [Rollout(id="ch0", role="challenger", group="ch0", question_id="q0", prompt="", completion="", reward=0.7,
                        detail={"s_q": 0.78})]
    seed = Question(id="s0", domain="math", text="Compute 1 + 2.", spec=MathSpec(answer="3"))
    attempts.append(Attempt(id="as0", question_id="s0", sample=0, completion="<answer>3</answer>", answer="3"))
    verdicts["as0"] = Verdict(attempt_id="as0", question_id="s0", correct=1.0, status="ok")
    solve_set = [seed] + [c.question for c in challenges]  # the pool's question first, as the solve set holds them
    correct = {}
    for a in attempts:
        correct.setdefault(a.question_id, []).append(verdicts[a.id].correct)
    traces = sage_traces(solve_set, challenges, q_scores, plans, p_scores, attempts, verdicts, correct, rollouts, pooled={"q0", "s0"},
                         n=3)
    assert [t.name for t in traces] == ["question q0", "question q2", "question q3"]  # the Challenger's first; q1 unsolved
    first = traces[0]
    assert [s.name for s in first.children] == ["challenger", "critic (question)", "planner", "critic (plan)",
                                                "solver (sample 0)", "solver (sample 1)"]
    assert first.outputs == {"pass_rate": 0.5, "in_pool": True} and traces[1].outputs["in_pool"] is False
    (pool_trace,) = sage_traces(solve_set, challenges, q_scores, plans, p_scores, attempts, verdicts, correct, rollouts, {"s0"}, n=4)[3:]
    assert [s.name for s in pool_trace.children] == ["solver (sample 0)"] and pool_trace.outputs["in_pool"]
    assert first.children[0].attributes == {"reward": 0.7, "s_q": 0.78} and first.children[0].outputs["question"] == "Compute 0 + 2."
    assert first.children[3].outputs["score"] == 0.56
    (check,) = first.children[5].children
    assert check.span_type == "TOOL" and check.outputs["correct"] == 1.0 and check.inputs["answer"] == "2"


def test_a_challenger_that_states_a_wrong_sum_earns_nothing_but_its_question_stands():
    from selfevolve.stages.rewards import spec_is_right

    wrong = _question("<question>Compute 39 + 5.</question><answer>79</answer>")
    right = _question("<question>Compute 39 + 5.</question><answer>44</answer>")
    assert wrong.spec.answer == right.spec.answer == "44"  # the environment's reference either way
    assert spec_holds(_rollout(wrong), [1, 0]) and not spec_is_right(_rollout(wrong))
    assert spec_is_right(_rollout(right))
    word = _question("<question>Ann has 3 apples and buys 4. How many now?</question><answer>9</answer>")
    assert spec_is_right(_rollout(word))  # a pseudo-label is judged by the Solver majority instead (spec_holds)
