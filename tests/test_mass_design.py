"""MASS workflow designs: schema, guardrails, tolerant parsing (fuzzed), and the executor
(fake backend for exact behaviour; HFBackend on an untrained tiny model for the real path)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfevolve.backends.base import Backend, Completion, SamplingConfig
from selfevolve.mass.parse import parse_design
from selfevolve.mass.design import (
    AgentSpec,
    DesignError,
    DesignLimits,
    Edge,
    Gate,
    WorkflowDesign,
    compose_prompt,
    planner_solver,
    planner_solver_review,
    seed_designs,
    single_agent,
    validate_design,
)
from selfevolve.mass.executor import STOP_CALLS, STOP_ERROR, STOP_TOKENS, run_design
from helpers import ScriptBackend
from selfevolve.roles.templates import render
from selfevolve.questions import arith


def _arith_answer(prompt: str) -> str:
    line = next((ln for ln in prompt.splitlines() if ln.startswith("Problem: ")), "")
    parsed = arith.parse_expression(line.removeprefix("Problem: "))
    return str(arith.evaluate(*parsed)) if parsed else "0"


def smart_reply(prompt: str, j: int = 0) -> str:
    if "Reply <score>" in prompt:
        return "<score>9</score>"
    if "<plan></plan>" in prompt:
        return "<plan>1. add the digits</plan>"
    return f"<think>x</think><answer>{_arith_answer(prompt)}</answer>"


QUESTIONS = arith.generate(5, seed=3, levels=(1, 2))


# Torch on 1 thread in this module: on a shared 2-core machine, intra-op threads contending with
# other jobs made 3 tiny SFT steps take ~8 s instead of ~0.3 s.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------ designs
def test_seeds_are_valid_serialise_and_reuse_role_templates():
    limits = DesignLimits()
    for d in seed_designs("math") + seed_designs("code"):
        assert validate_design(d, limits) == (True, "ok"), d.name
        back = WorkflowDesign.from_json(d.to_json())
        assert back == d and back.design_id == d.design_id
        assert json.loads(d.structure_json())["agents"]
    ps = planner_solver("math")
    q = "Compute 47 + 8."
    assert compose_prompt(ps.agent("planner").instruction, q) == render("planner", question=q)
    assert compose_prompt(ps.agent("solver").instruction, q, [("Plan", "1. add")]) == render("solver", question=q, domain="math", plan="1. add")
    assert compose_prompt(single_agent("code").agent("solver").instruction, q) == render("solver", question=q, domain="code", plan=None)
    # bookkeeping does not change identity; structure does
    assert ps.model_copy(update={"name": "x", "origin": "model"}).design_id == ps.design_id
    assert planner_solver_review("math").design_id != ps.design_id


def _design(**kw) -> dict:
    base = {"agents": [{"agent_id": "a", "role": "A", "instruction": "Do a."},
                       {"agent_id": "b", "role": "B", "instruction": "Give <answer></answer>."}],
            "orchestrator": "a", "answer": "b", "edges": [{"source": "a", "target": "b"}]}
    base.update(kw)
    return base


A, B = {"agent_id": "a", "role": "A", "instruction": "Do a."}, {"agent_id": "b", "role": "B", "instruction": "Do b."}
C = {"agent_id": "c", "role": "C", "instruction": "Do c."}


@pytest.mark.parametrize("data, expect", [
    (_design(agents=[A, dict(A)]), "duplicate agent_id"),
    (_design(orchestrator="z"), "orchestrator 'z' is not an agent"),
    (_design(answer="z"), "answer 'z' is not an agent"),
    (_design(edges=[{"source": "a", "target": "z"}]), "unknown agent"),
    (_design(edges=[{"source": "a", "target": "a"}, {"source": "a", "target": "b"}]), "self-loop"),
    (_design(edges=[{"source": "a", "target": "b"}, {"source": "a", "target": "b"}]), "duplicate edge"),
    (_design(edges=[]), "not reachable"),
    (_design(agents=[A, B, C], edges=[{"source": "a", "target": "b"}, {"source": "b", "target": "c"}, {"source": "c", "target": "b"}]), "cycle"),
    (_design(agents=[A, B, C], edges=[{"source": "a", "target": "b"}, {"source": "c", "target": "a"}]), "incoming"),
    (_design(agents=[A, B, C], edges=[{"source": "a", "target": "b"}, {"source": "a", "target": "c"}]), "never reaches the answer"),
    (_design(agents=[A, B, C]), "'c' is not reachable"),
    (_design(gate={"reviewer": "z"}), "gate reviewer 'z'"),
    (_design(agents=[]), "schema"),
    (_design(agents=[{"agent_id": "bad id!", "role": "r", "instruction": "i"}]), "schema"),
    (_design(edges=[{"source": "a", "target": "b", "label": "x\nInjected: y"}]), "schema"),
    (_design(extra_key=1), "schema"),
    ("not json", "schema"),
    (42, "schema"),
])
def test_guardrails_reject_malformed_designs_with_a_reason(data, expect):
    ok, reason = validate_design(data, DesignLimits())
    assert not ok and expect in reason


def test_guardrails_enforce_limits_and_context_budget():
    ps = planner_solver()
    assert "max_agents" in validate_design(ps, DesignLimits(max_agents=1))[1]
    big_gate = ps.model_copy(update={"gate": Gate(reviewer="planner", max_redelegations=8)})
    assert "max_calls" in validate_design(big_gate, DesignLimits(max_calls=6))[1]
    assert "max_tokens_per_run" in validate_design(ps, DesignLimits(max_tokens_per_run=100, max_new_tokens=96))[1]
    long = WorkflowDesign(agents=[AgentSpec(agent_id="s", role="S", instruction="x" * 1900)], orchestrator="s", answer="s")
    ok, reason = validate_design(long, DesignLimits(max_model_len=512))
    assert not ok and "context budget" in reason and "characters/4" in reason
    assert validate_design(long, DesignLimits(max_model_len=2048))[0]
    # a gate-only reviewer (no edges) is allowed
    rev = ps.model_copy(update={"agents": list(ps.agents) + [AgentSpec(agent_id="judge", role="Judge", instruction="Rate.")],
                                "gate": Gate(reviewer="judge")})
    assert validate_design(rev, DesignLimits()) == (True, "ok")


def test_parse_design_tolerates_model_formats():
    agents = [{"agent_id": "planner", "role": "Planner", "instruction": "Plan it in <plan></plan>."},
              {"id": "solver", "prompt": "Solve; <answer></answer>."}]
    text = "Sure! Here it is:\n<design>\n```json\n" + json.dumps(agents) + "\n```\n</design> done"
    d, reason = parse_design(text, "math")
    assert reason == "ok" and d.agent_ids == ["planner", "solver"] and d.orchestrator == "planner" and d.answer == "solver"
    assert [(e.source, e.target) for e in d.edges] == [("planner", "solver")] and d.origin == "model"
    assert validate_design(d, DesignLimits())[0]
    # full object with pair edges and a gate, trailing garbage, unclosed tag (cut-off generation)
    obj = {"agents": agents[:1] + [{"agent_id": "solver", "role": "S", "instruction": "Solve."}], "answer": "solver",
           "edges": [["planner", "solver", "Plan"]], "gate": {"max_redelegations": 1}}
    d, reason = parse_design("<design>" + json.dumps(obj) + " trailing", "code")
    assert reason == "ok" and d.domain == "code" and d.gate.reviewer == "planner" and d.edges[0].label == "Plan"
    for bad, why in [("", "empty"), ("just words", "no JSON"), ("<design></design>", "empty"), ("<design>{\"agents\": [1]}</design>", "agents[0]"),
                     ("<design>[]</design>", "agents"), (None, "expected text"), ("<design>{\"agents\": [{\"agent_id\": \"a\"}]}</design>", "schema")]:
        d, reason = parse_design(bad)
        assert d is None and why in reason, (bad, reason)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["agents", "agent_id", "id", "role", "instruction", "orchestrator", "answer", "edges", "source",
                         "target", "label", "extract", "gate", "reviewer", "max_redelegations", "design", "x"]) | st.text(max_size=8),
        children, max_size=5),
    max_leaves=25)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=json_values)
def test_fuzz_arbitrary_json_never_crashes_parser_or_validator(obj):
    text = "<design>" + json.dumps(obj) + "</design>"
    d, reason = parse_design(text)
    assert isinstance(reason, str) and reason
    if d is None:
        assert reason != "ok"
    ok, why = validate_design(d if d is not None else obj, DesignLimits())
    assert isinstance(ok, bool) and why and (ok or why != "ok")


@settings(max_examples=250, deadline=None)
@given(text=st.text(max_size=300) | st.binary(max_size=100).map(lambda b: b.decode("latin-1")))
def test_fuzz_arbitrary_text_never_crashes_parser(text):
    for t in (text, "<design>" + text, text + "</design>", "<design>[{" + text + "</design>"):
        d, reason = parse_design(t)
        assert (d is None) == (reason != "ok")
        assert validate_design(t)[1]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_fuzz_perturbed_valid_designs_get_a_verdict(data):
    base = planner_solver_review().structure()
    path = data.draw(st.sampled_from(["orchestrator", "answer", "edges", "gate", "agents"]))
    base[path] = data.draw(json_values)
    ok, reason = validate_design(base, DesignLimits())
    assert reason and (ok or reason != "ok")
    d, r2 = parse_design(json.dumps(base))
    assert r2


# ------------------------------------------------------------------------------ executor
def test_executor_batches_across_questions_and_records_everything():
    be = ScriptBackend(smart_reply)
    d = planner_solver()
    res = run_design(be, d, QUESTIONS, limits=DesignLimits(), seed=0)
    assert len(be.calls) == 2 == res.backend_calls  # one chat call per agent step, all questions together
    assert [len(c[0]) for c in be.calls] == [5, 5]
    for q, t in zip(QUESTIONS, res.trajectories):
        assert t.completed and t.question_id == q.id and t.design_id == d.design_id
        assert t.final_answer == q.answer
        assert [(m.agent_id, m.role) for m in t.messages] == [("planner", "user"), ("planner", "assistant"), ("solver", "user"), ("solver", "assistant")]
        assert t.messages[0].content == render("planner", question=q.text)
        assert t.messages[2].content == render("solver", question=q.text, domain="math", plan="1. add the digits")
        assert t.output_tokens == sum(m.output_tokens for m in t.messages) > 0
        assert t.messages[3].prompt_tokens > 0
    assert res.stop_reasons == [None] * 5 and res.calls == [2] * 5


def test_executor_gate_redelegates_until_accepted_and_samples_branch():
    def reply(prompt, j):
        if "Reply <score>" in prompt:
            return "<score>9</score>" if "<answer>42</answer>" in prompt or "Answer: <think>x</think><answer>42" in prompt else "<score>2</score>"
        if "rejected" in prompt:
            return "<think>x</think><answer>42</answer>"
        return f"<plan>{j + 1}. add</plan>" if "<plan></plan>" in prompt else "<answer>7</answer>"

    be = ScriptBackend(reply)
    d = planner_solver_review()  # one re-delegation allowed
    res = run_design(be, d, QUESTIONS[:3], limits=DesignLimits(), samples=2, seed=1)
    assert len(res.trajectories) == 6 and be.calls[0][1].n == 2 and all(c[1].n == 1 for c in be.calls[1:])
    t = res.trajectories[0]
    roles = [(m.agent_id, m.role) for m in t.messages]
    assert roles == [("planner", "user"), ("planner", "assistant"), ("solver", "user"), ("solver", "assistant"),
                     ("planner", "user"), ("planner", "assistant"), ("solver", "user"), ("solver", "assistant"),
                     ("planner", "user"), ("planner", "assistant")]
    assert t.final_answer == "42" and res.review_scores[0] == [pytest.approx(1 / 9), pytest.approx(8 / 9)]
    # samples branch at the orchestrator's step (n=2) and carry their own plans downstream
    assert [res.trajectories[k].messages[1].content for k in (0, 1)] == ["<plan>1. add</plan>", "<plan>2. add</plan>"]
    assert res.trajectories[1].messages[2].content.endswith("Plan: 2. add")
    # the re-delegation continues the solver's own thread
    redo = [c for c in be.calls if c[0] and "rejected" in c[0][0][-1]["content"]][0]
    assert [m["role"] for m in redo[0][0]] == ["user", "assistant", "user"]
    assert max(res.calls) <= DesignLimits().max_calls


def test_executor_enforces_limits_at_run_time():
    d = planner_solver_review()
    be = ScriptBackend(smart_reply)
    with pytest.raises(DesignError):
        run_design(be, d, QUESTIONS, limits=DesignLimits(max_calls=2))
    res = run_design(be, d, QUESTIONS[:2], limits=DesignLimits(max_calls=1), check_limits=False)
    assert res.stop_reasons == [STOP_CALLS] * 2 and not any(t.completed for t in res.trajectories)
    assert all(t.final_answer is None for t in res.trajectories)
    # token budget: every call is capped to what is left; an exhausted budget stops the run
    verbose = ScriptBackend(lambda p, j: "<plan>" + "w " * 200 + "</plan>")
    res = run_design(verbose, planner_solver(), QUESTIONS[:2], limits=DesignLimits(max_tokens_per_run=96, max_new_tokens=96),
                     check_limits=False)
    assert all(t.output_tokens <= 96 for t in res.trajectories) and res.stop_reasons == [STOP_TOKENS] * 2
    # the gate is best-effort: over the call limit it just ends, the run is still complete
    res = run_design(be, d, QUESTIONS[:2], limits=DesignLimits(max_calls=2), check_limits=False)
    assert res.stop_reasons == [None, None] and all(t.completed for t in res.trajectories)
    # backend errors make a run incomplete but still recorded
    res = run_design(ScriptBackend(smart_reply, finish="error"), single_agent(), QUESTIONS[:1])
    assert res.stop_reasons == [STOP_ERROR] and len(res.trajectories[0].messages) == 2


def test_executor_rejects_unsound_designs_and_bad_backends():
    cyc = WorkflowDesign(agents=[AgentSpec(agent_id="a", role="A", instruction="a"), AgentSpec(agent_id="b", role="B", instruction="b")],
                         orchestrator="a", answer="b", edges=[Edge(source="a", target="b"), Edge(source="b", target="a")])
    with pytest.raises(DesignError):
        run_design(ScriptBackend(smart_reply), cyc, QUESTIONS)

    class Short(Backend):
        def chat(self, conversations, sampling):
            return []

    with pytest.raises(RuntimeError, match="contract"):
        run_design(Short(), single_agent(), QUESTIONS)
    assert run_design(Short(), single_agent(), []).trajectories == []


def test_executor_on_tiny_model_records_full_trajectories(tiny_model_dir):
    hf = pytest.importorskip("selfevolve.backends.hf")
    backend = hf.HFBackend(str(tiny_model_dir), device="cpu")
    qs = QUESTIONS[:2]
    d = planner_solver_review()
    limits = DesignLimits(max_model_len=backend.max_model_len, max_new_tokens=12)
    res = run_design(backend, d, qs, limits=limits, sampling=SamplingConfig(temperature=1.0, max_new_tokens=12),
                     samples=2, seed=0)
    assert len(res.trajectories) == 4
    for i, t in enumerate(res.trajectories):
        q = qs[i // 2]
        assert t.question_id == q.id and t.completed
        users = [m for m in t.messages if m.role == "user"]
        outs = [m for m in t.messages if m.role == "assistant"]
        assert len(users) == len(outs) >= 3  # planner, solver, at least one review
        assert users[0].content == render("planner", question=q.text)
        assert all(0 < m.output_tokens <= 12 and m.prompt_tokens > 0 for m in outs)
        assert t.output_tokens == sum(m.output_tokens for m in outs)
        assert {m.agent_id for m in t.messages} == {"planner", "solver"}
    assert res.backend_calls <= 2 + 3  # DAG steps + at most review/redo/review rounds, batched across questions


def test_split_solver_combine_reaches_three_digits_past_what_one_pass_does():
    """With the parts as the Solver's own problems (``Problem`` edges), the team answers every sum
    whose high part one pass answers: 9+9 digits from a Solver that adds up to 6+6 and nothing
    longer (the single agent scores 0 there). Each part solver's turn is exactly the Solver's
    prompt on the part, written as a question with its zeros dropped (``050 + 008`` -> ``Compute
    50 + 8.``), so a run's part turns are rows one pass learns from; carries across the split
    (``999999 + 1``) and zeros in the parts come out right. It is a math-only seed, in the order
    ``mass.seed_designs`` names."""
    from helpers import SOLVER_REACH, split_world

    from selfevolve.config import Params
    from selfevolve.mass.design import split_solver_combine
    from selfevolve.roles.templates import render

    team, alone = split_solver_combine(), single_agent()
    assert validate_design(team, DesignLimits(max_model_len=1024)) == (True, "ok")
    qs = arith.generate(30, seed=3, forms=["9+9", "9+4", "5+9", "7+7", "3+3", "1+1"])
    qs.append(qs[0].model_copy(update={"id": "zeros", "text": "Compute 4050 + 1008.", "spec": arith.MathSpec(answer="5058"), "form": "4+4"}))
    qs.append(qs[0].model_copy(update={"id": "carry", "text": "Compute 999999 + 1.", "spec": arith.MathSpec(answer="1000000"), "form": "6+1"}))
    backend = ScriptBackend(split_world)
    res = run_design(backend, team, qs, limits=DesignLimits(max_model_len=1024), seed=0)
    assert [t.final_answer for t in res.trajectories] == [q.spec.answer for q in qs]
    one = run_design(backend, alone, qs, limits=DesignLimits(max_model_len=1024), seed=0)
    reach = [max(map(int, arith.parse_form(q.form)[1])) <= SOLVER_REACH for q in qs]
    assert [t.final_answer == q.spec.answer for q, t in zip(qs, one.trajectories)] == reach and not all(reach)
    zeros = next(t for t in res.trajectories if t.question_id == "zeros")
    turns = {m.agent_id: m.content for m in zeros.messages if m.role == "user"}
    assert turns["low"] == render("solver", question="Compute 50 + 8.", domain="math", plan=None) and turns["high"] == render("solver", question="Compute 4 + 1.", domain="math", plan=None)
    assert turns["combiner"].endswith("\nLow: 58\nHigh: 5")
    assert [d.name for d in seed_designs("math")] == ["single_agent", "split_solver_combine", "planner_solver", "planner_solver_review"]
    assert [d.name for d in seed_designs("math")] == Params().mass.seed_designs  # config's names and the designs agree
    assert "split_solver_combine" not in {d.name for d in seed_designs("code")}
    assert [d.name for d in seed_designs("math", ["planner_solver", "single_agent"])] == ["planner_solver", "single_agent"]


def test_a_problem_edge_restates_the_problem_and_never_raises():
    """``restated_problem``: the first non-empty ``Problem`` input, as a math question when it is an
    expression and as written otherwise; no such input (or an empty one) keeps the question."""
    from selfevolve.mass.executor import restated_problem

    q = QUESTIONS[0]
    assert restated_problem(q, []) == q.text
    assert restated_problem(q, [("Problem", "  "), ("Plan", "x")]) == q.text
    assert restated_problem(q, [("Plan", "1 + 1"), ("Problem", "007 + 0300")]) == "Compute 7 + 300."
    assert restated_problem(q, [("Problem", "the sum of the tens")]) == "the sum of the tens"
    for junk in ("<high>", "1 +", "9" * 5000 + " + 1", "\x00", "+ + +"):
        assert isinstance(restated_problem(q, [("Problem", junk)]), str)
    code = q.model_copy(update={"domain": "code"})
    assert restated_problem(code, [("Problem", "1 + 2")]) == "1 + 2"
