"""The champion's reach distilled into the single pass (``selfevolve.mass.distill``): which forms,
what a chain looks like, what the train_rl stage draws of it. A scripted backend whose roles are
done right (``helpers.split_world``) against a one pass that only reads operands of up to 4 digits."""

from __future__ import annotations

import json
import random
import re

import pytest

from helpers import ScriptBackend, split_world

from selfevolve.mass.design import DesignLimits, compose_prompt, single_agent, split_solver_combine, template_instruction
from selfevolve.mass.distill import LADDER_SOURCE, TEAM_TURN, chain_reply, distill, forms_to_distill, ladder_forms, split_turns
from selfevolve.questions import arith
from selfevolve.records import DISTILL_SOURCE, AgentMessage, Rollout, Trajectory


def verify(specs, answers):
    return [float(a is not None and a.strip() == s.answer) for s, a in zip(specs, answers)]


def short_one_pass(prompt: str, j: int = 0) -> str:
    """One pass right when both operands have at most 4 digits; the split roles done right."""
    if prompt.split("\n")[0] != template_instruction("solver"):
        return split_world(prompt)
    a, b = map(int, re.search(r"Problem: Compute (\d+) \+ (\d+)\.", prompt).groups())
    return f"<think>{arith.scratchpad([a, b], ['+'])}</think><answer>{a + b if max(a, b) < 10 ** 4 else 0}</answer>"


def run(design, forms, n, probe=4, world=short_one_pass):
    return distill(ScriptBackend(world), design, forms, random.Random(0), n, prefix="c1-ladder-", verify_fn=verify,
                   limits=DesignLimits(max_model_len=1024, max_new_tokens=256), seed=0, probe=probe)


def test_the_team_is_distilled_on_the_forms_it_wins_and_one_pass_keeps_its_way_beside_them():
    rows, report = run(split_solver_combine(), ["4+3", "6+6", "5+5"], 42)
    assert report["probe_per_form"] == 4 and report["forms"] == ["5+5", "6+6"] and report["kept_forms"] == ["4+3"]
    assert report["by_form"]["4+3"] == {"n": 4, "team": 1.0, "one_pass": 1.0} and report["by_form"]["6+6"]["one_pass"] == 0.0
    # 12 probes, then 30 more: 18 (0.6) for the team's forms, 12 for the kept one; every answer here is right
    # and each team run also as its four agents' own turns (splitter, low, high, combiner), in their own prompts
    assert report["questions"] == 42 and report["team_rows"] == 8 + 18 and report["one_pass_rows"] == 4 + 12
    solver_rows, turns = split_turns(rows)
    assert report["team_turn_rows"] == len(turns) == 4 * 26 and len(rows) == 42 + 4 * 26 == len(solver_rows) + len(turns)
    assert all(t.detail["by"] == TEAM_TURN for t in turns) and not any(r.detail["by"] == TEAM_TURN for r in solver_rows)
    team_design = split_solver_combine()
    for k, ag in enumerate(team_design.agents):  # the k-th turn of each run is agent k's, from its own instruction
        assert all(t.prompt.startswith(ag.instruction) for t in turns if t.id.endswith(f"-turn{k}"))
    assert all(t.detail["form"] in ("5+5", "6+6") and "<answer>" not in t.completion for t in turns if t.id.endswith("-turn0"))
    rows = solver_rows
    instruction = single_agent().agents[0].instruction
    for row in rows:
        a, b = map(int, re.search(r"Problem: Compute (\d+) \+ (\d+)\.$", row.prompt).groups())
        assert row.role == "solver" and row.prompt == compose_prompt(instruction, f"Compute {a} + {b}.")  # the single pass's own prompt
        assert row.completion.endswith(f"<answer>{a + b}</answer>") and row.detail["source"] == DISTILL_SOURCE
        if row.detail["by"] == "team":
            assert row.detail["form"] in ("5+5", "6+6") and row.completion.startswith("<think>splitter ")
            assert "<low>" in row.completion and " combiner " in row.completion
        else:
            assert row.detail["form"] == "4+3" and row.completion == short_one_pass(row.prompt)
    again = run(split_solver_combine(), ["4+3", "6+6", "5+5"], 42)[0]
    assert [r.id for r in again if r.detail["by"] != TEAM_TURN] == [r.id for r in rows]  # the same draws
    # a champion that is the single agent carries nothing; nor do no forms, too few questions to probe
    # each form once, or no form the team wins
    assert run(single_agent(), ["6+6"], 30)[0] == [] and run(split_solver_combine(), [], 30)[0] == [] and run(None, ["6+6"], 30)[0] == []
    assert run(split_solver_combine(), ["6+6", "5+5"], 1)[0] == [] and run(split_solver_combine(), ["4+3", "3+4"], 30)[0] == []


def test_a_chain_is_every_agent_turn_in_order_and_never_raises_on_model_text():
    msgs = [AgentMessage(agent_id="splitter", role="user", content="Split ..."),
            AgentMessage(agent_id="splitter", role="assistant", content="<think>004050+000542</think><low>050 + 542</low><high>004 + 000</high>"),
            AgentMessage(agent_id="low", role="assistant", content="<think>050+542 r=295 =592</think><answer>592</answer>"),
            AgentMessage(agent_id="high", role="assistant", content="no tags at all <answer>4"),
            AgentMessage(agent_id="combiner", role="assistant", content="<think>low 0592 carry 0 rest 592 high 4+0=4 join 4 592</think><answer>4592</answer>")]
    run = Trajectory(id="t", design_id="d", question_id="q", messages=msgs, final_answer="4592", completed=True, correct=1.0)
    assert chain_reply(run) == ("<think>splitter 004050+000542 <low>050 + 542</low><high>004 + 000</high> low 050+542 r=295 =592 "
                                "high no tags at all combiner low 0592 carry 0 rest 592 high 4+0=4 join 4 592</think><answer>4592</answer>")
    assert chain_reply(run.model_copy(update={"correct": 0.0})) is None
    assert chain_reply(run.model_copy(update={"final_answer": None})) is None
    # a part solver that is one pass answering in a team's way (split_solver_combine): its tags, inside its think, once
    nested = AgentMessage(agent_id="high", role="assistant", content="<think>splitter 4+0 <low>4 + 0</low><high>0 + 0</high> =4</think><answer>4</answer>")
    chained = chain_reply(run.model_copy(update={"messages": msgs[:3] + [nested] + msgs[4:]}))
    assert " high splitter 4+0 <low>4 + 0</low><high>0 + 0</high> =4 combiner " in chained and chained.count("<low>4 + 0</low>") == 1
    for junk in ("<think>", "</think><low>", "<low><high></low>", "\x00<answer><answer>", ""):
        odd = run.model_copy(update={"messages": [AgentMessage(agent_id="a", role="assistant", content=junk)]})
        assert isinstance(chain_reply(odd), str)


def test_the_ladder_reaches_a_digit_past_the_pool_and_what_was_distilled_and_leaves_out_the_seed_forms():
    seed = arith.seed_forms()
    pool = arith.generate(20, seed=1, forms=["2+2", "5+1"]) + [arith.generate(1, seed=2, forms=["2+3"])[0].model_copy(update={"form": "x+y"})]
    forms = ladder_forms(pool, seed, 3, beyond=0)
    assert forms == ["4+3", "3+4", "4+4", "5+3", "3+5", "5+4", "4+5", "5+5"] and not set(forms) & set(seed)
    assert ladder_forms(pool, seed, 3) == forms + ["6+3", "3+6", "6+4", "4+6", "6+5", "5+6", "6+6"]  # one digit longer
    assert ladder_forms(pool, seed, 3, reached=["7+3", "bad", None])[-1] == "8+8"  # an earlier cycle distilled 7 digits
    longer = pool + arith.generate(1, seed=3, forms=["6+1"])
    assert "6+1" in ladder_forms(longer, seed, 1, beyond=0) and "6+1" not in ladder_forms(longer, seed, 3)  # the shorter operand's floor
    assert ladder_forms([], seed, 3) == [] and ladder_forms(pool, seed, 3, reached=["39+3"])[-1] == "40+40"  # arith.MAX_DIGITS
    rows = run(split_solver_combine(), forms, 40, probe=2)[0]
    assert {r.detail["form"] for r in rows if r.detail["by"] == "team"} == {"5+3", "3+5", "5+4", "4+5", "5+5"}  # one pass reads 4 digits
    assert all(r.question_id.startswith("c1-ladder-") for r in rows) and LADDER_SOURCE == "environment:ladder"


def test_forms_are_distilled_only_past_the_margin():
    qs = arith.generate(10, seed=4, forms=["5+4"]) + arith.generate(10, seed=5, forms=["6+3"])
    team = [1] * 10 + [1] * 3 + [0] * 7   # 6+3: the team 0.3, one pass 0.2
    one = [0] * 10 + [1] * 2 + [0] * 8
    forms, stats = forms_to_distill(qs, team, one)
    assert forms == ["5+4"] and stats["5+4"]["team"] == 1.0 and stats["5+4"]["one_pass"] == 0.0
    assert forms_to_distill(qs, team, one, margin=0.05)[0] == ["5+4", "6+3"]
    assert forms_to_distill(qs, team, one, margin=0.05, max_one_pass=0.1)[0] == ["5+4"]  # 6+3: one pass is learning it


def _rows(n, text, reply, source):
    return [Rollout(id=f"{source}-{i}", role="solver", group=f"g{i}", question_id=f"q{i}", prompt=text.format(i=i),
                    completion=reply.format(i=i, s=2 * i), reward=1.0, detail={"source": source}) for i in range(n)]


def test_distill_sft_teaches_the_rows_and_the_turns_and_the_replay_keeps_the_rest(tiny_model_dir, tmp_path, monkeypatch):
    """The distillation step lowers the distilled rows' and the team's turns' loss a lot and,
    drawing half of each batch from the replay, the replayed rows' too; each batch runs in
    length-sorted micro-batches of ``DISTILL_MICRO_BATCH_ROWS``; it saves a loadable model; it
    refuses to run on nothing or on shares that leave a pool no draw."""
    import pytest
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.config import LoraParams
    from selfevolve.training import loop
    from selfevolve.training.loop import sft_loss
    from selfevolve.training.sft import DISTILL_MICRO_BATCH_ROWS, distill_sft

    cuts, real_cut = [], loop.micro_batches
    monkeypatch.setattr(loop, "micro_batches", lambda tok, enc, rows_per_part, **k: cuts.append(rows_per_part) or real_cut(tok, enc, rows_per_part, **k))

    rows = _rows(4, "Compute {i}0000 + {i}.", "<think>splitter {i} + 0 low {i} high 0 combiner join</think><answer>{s}</answer>", DISTILL_SOURCE)
    replay = _rows(4, "Compute {i} - {i}.", "<answer>0</answer>", "warm_start")
    turns = _rows(4, "Split the problem.\nProblem: Compute {i}0000 + {i}.", "<low>00{i} + 00{i}</low>", "team")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        before = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        d0, r0, t0 = (sft_loss(before, tok, x, 256).item() for x in (rows, replay, turns))
    summary = distill_sft(tiny_model_dir, rows, replay, tmp_path / "out", lora=LoraParams(), turns=turns, steps=30, batch_size=8,
                          learning_rate=3e-3)
    with torch.no_grad():
        after = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
        d1, r1, t1 = (sft_loss(after, tok, x, 256).item() for x in (rows, replay, turns))
    assert summary["trained"] and summary["steps"] == 30 and summary["rows"] == 4 and summary["replay_rows"] == 4
    assert summary["turn_rows"] == 4 and cuts == [DISTILL_MICRO_BATCH_ROWS] * 30
    assert d1 < 0.5 * d0 and r1 < r0 and t1 < 0.5 * t0  # each pool is drawn: the turns at their own share
    for bad, msg, kw in (([], "nothing to distil", {}), (rows, "distillation share", {"share": 0.0}),
                         (rows, "turns' share", {"share": 0.5, "turn_share": 0.5})):
        with pytest.raises(ValueError, match=msg):
            distill_sft(tiny_model_dir, bad, replay, tmp_path / "x", lora=LoraParams(), steps=1, **kw)


def test_the_sft_stage_trains_on_the_distillation_rows_when_the_search_wrote_them(tiny_model_dir, tmp_path, monkeypatch):
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from selfevolve.config import Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import write_jsonl
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import train_sft

    base, P = cycle_paths("base", tmp_path), cycle_paths("c1", tmp_path)
    base.dir.mkdir(parents=True)
    P.mass_dir.mkdir(parents=True)
    write_jsonl(base.replay, _rows(4, "Compute {i} - {i}.", "<answer>0</answer>", "warm_start"))
    write_jsonl(P.earlier_labels, [])
    write_jsonl(P.self_labels, [])
    turns = [[{"role": "user", "content": f"Split the problem.\nProblem: Compute {i}0000 + {i}."},
              {"role": "assistant", "content": f"<low>00{i} + 00{i}</low>"}] for i in range(2)]  # the team's own turns
    P.sft_dataset.write_text("".join(json.dumps({"messages": t}) + "\n" for t in turns))
    ladder_turn = Rollout(id="distill-q9-turn1", role="solver", group="q9", question_id="q9", prompt="Solve the part below.\nLow part: 9 + 9",
                          completion="<answer>18</answer>", reward=1.0, detail={"source": DISTILL_SOURCE, "by": TEAM_TURN})
    write_jsonl(P.mass_distill, _rows(4, "Compute {i}0000 + {i}.", "<think>splitter {i}</think><answer>{s}</answer>", DISTILL_SOURCE)
                + [ladder_turn])
    shutil.copytree(tiny_model_dir, P.rl_model)
    params = Params()
    params.sft.keep_if_worse = True  # the validation guard is the RL step's, tested there
    params.model.train_precision = "float32"
    from selfevolve.training import sft as sft_module

    calls, real = [], sft_module.distill_sft
    monkeypatch.setattr(sft_module, "distill_sft", lambda *a, **k: calls.append(k) or real(*a, **{**k, "steps": 4, "batch_size": 4}))
    metrics = train_sft(StageContext(params, "c1", tmp_path))
    assert calls and metrics["sft_trained"] == 1 and metrics["rows"] == 4 and metrics["replay_rows"] == 4
    assert metrics["turn_rows"] == 3  # the team keeps its roles: its own turns (distilled runs', then the chats) beside the chains
    assert [r.completion for r in calls[0]["turns"]] == ["<answer>18</answer>"] + [t[1]["content"] for t in turns]
    start, trained = (AutoModelForCausalLM.from_pretrained(d).state_dict() for d in (P.rl_model, P.model))
    assert not all(torch.equal(start[k], trained[k]) for k in start)
    params.mass.enabled = False  # without MASS the rows are not read: the champion's chats (none here) decide
    P.sft_dataset.write_text("")
    shutil.rmtree(P.model)
    calls.clear()
    assert train_sft(StageContext(params, "c1", tmp_path))["sft_trained"] == 0 and not calls


def test_a_distillation_is_judged_on_the_forms_it_distilled_beside_validation(tiny_model_dir, tmp_path, monkeypatch):
    """The forms a distillation teaches lie past the validation ladder from the 9-digit sums on, so
    validation alone sees only what the step costs: fresh questions of the distilled forms join
    the questions being moved. A step that loses one frontier question of validation and wins its
    forms is kept; the same loss with nothing won on its forms is refused, and so is it without the
    distillation's report (validation alone)."""
    import shutil

    from selfevolve.config import CycleSpec, Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import Question, read_jsonl, write_jsonl
    from selfevolve.stages import train as stage
    from selfevolve.stages.base import seeds
    from selfevolve.stages.context import StageContext
    from selfevolve.training import sft as sft_module

    params = Params()
    params.cycles = {"c1": CycleSpec(init="base")}
    params.model.train_precision = "float32"
    params.rl.eval_questions = 30
    seeds(StageContext(params, "base", tmp_path))
    base, P = cycle_paths("base", tmp_path), cycle_paths("c1", tmp_path)
    write_jsonl(base.replay, _rows(4, "Compute {i} - {i}.", "<answer>0</answer>", "warm_start"))
    P.mass_dir.mkdir(parents=True)
    for path in (P.earlier_labels, P.self_labels, P.earlier_distilled):
        write_jsonl(path, [])
    P.sft_dataset.write_text("")
    forms = ["9+5", "5+9"]
    (P.mass_distill_report).write_text(json.dumps({"forms": forms}))
    ctx = StageContext(params, "c1", tmp_path)
    first = stage.distilled_form_questions(ctx, [])
    trained_on = Rollout(id="d0", role="solver", group="g", question_id="g", prompt=f"Solve the problem.\nProblem: {first[0].text}",
                         completion="<think>splitter</think><answer>1</answer>", reward=1.0, detail={"source": DISTILL_SOURCE})
    write_jsonl(P.mass_distill, [trained_on])
    checks = stage.distilled_form_questions(ctx, [trained_on])
    assert [q.form for q in checks] == ["9+5"] * stage.DISTILLED_CHECK_PER_FORM + ["5+9"] * stage.DISTILLED_CHECK_PER_FORM
    held = {q.text for f in (base.val, base.heldout) for q in read_jsonl(f, Question)}
    assert first[0].text not in {q.text for q in checks} and not held & {q.text for q in checks}
    shutil.copytree(tiny_model_dir, P.rl_model)
    real = sft_module.distill_sft
    monkeypatch.setattr(sft_module, "distill_sft", lambda *a, **k: real(*a, **{**k, "steps": 2, "batch_size": 2}))
    lost = next(q.id for q in stage.validation_questions(ctx) if q.split == "frontier")

    def scripted(after_on_forms):
        def correctness(backend, qs, config, seed=0):
            trained = backend.model_path == str(P.model)
            return [int(after_on_forms if "-sft-check-" in q.id and trained else "-sft-check-" not in q.id and not (trained and q.id == lost))
                    for q in qs]
        return correctness

    for after_on_forms, kept in ((1, 1), (0, 0)):
        monkeypatch.setattr(stage, "correctness", scripted(after_on_forms))
        shutil.rmtree(P.model, ignore_errors=True)
        metrics = stage.train_sft(ctx)
        assert metrics["sft_kept"] == kept and metrics["sft_distilled_form_questions"] == len(checks)
        assert metrics["sft_distilled_forms_before"] == 0.0 and metrics["sft_distilled_forms_after"] == after_on_forms
        assert metrics["sft_val_accuracy_after"] < metrics["sft_val_accuracy_before"] == 1.0
    P.mass_distill_report.unlink()  # no report (an older cycle's folder): validation alone, and the lost question refuses
    monkeypatch.setattr(stage, "correctness", scripted(1))
    shutil.rmtree(P.model)
    metrics = stage.train_sft(ctx)
    assert metrics["sft_kept"] == 0 and metrics["sft_distilled_form_questions"] == 0


def test_every_earlier_cycles_distilled_runs_are_carried_and_distilled_again(tiny_model_dir, tmp_path, monkeypatch):
    """``datasets`` writes a cycle's earlier distilled rows as its start's earlier distilled rows plus
    its start's ``mass/distill.jsonl`` (c2 carries c1's runs, c3 c1's and c2's), and ``train_sft``
    distils them beside the cycle's own, the earlier team turns among the turns (without them a
    cycle taught one form and lost the ones the cycle before had taught); a cycle whose search
    distilled nothing does not distil the earlier rows alone."""
    import shutil

    from selfevolve.config import CycleSpec, Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import read_jsonl, write_jsonl
    from selfevolve.stages.base import seeds
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import datasets, train_sft
    from selfevolve.training import sft as sft_module

    params = Params()
    params.cycles = {"c1": CycleSpec(init="base"), "c2": CycleSpec(init="c1"), "c3": CycleSpec(init="c2")}
    params.sft.keep_if_worse = True
    params.model.train_precision = "float32"
    seeds(StageContext(params, "base", tmp_path))
    base = cycle_paths("base", tmp_path)
    assert read_jsonl(base.mass_distill, Rollout) == [] and read_jsonl(base.earlier_distilled, Rollout) == []
    write_jsonl(base.replay, _rows(4, "Compute {i} - {i}.", "<answer>0</answer>", "warm_start"))
    write_jsonl(base.earlier_labels, [])
    write_jsonl(base.self_labels, [])
    chain = "<think>splitter {i}</think><answer>{s}</answer>"
    own = {"c1": _rows(3, "Compute {i}00000 + {i}.", chain, DISTILL_SOURCE),
           "c2": [],  # c2's search distilled nothing
           "c3": _rows(2, "Compute {i}0000000 + {i}.", chain, DISTILL_SOURCE)}
    turn = Rollout(id="c1-turn", role="solver", group="q9", question_id="q9", prompt="Solve the part below.\nLow part: 9 + 9",
                   completion="<answer>18</answer>", reward=1.0, detail={"source": DISTILL_SOURCE, "by": TEAM_TURN})
    for c in own:
        own[c] = [r.model_copy(update={"id": f"{c}-{r.id}"}) for r in own[c]] + ([turn] if c == "c1" else [])
    calls, real = [], sft_module.distill_sft
    monkeypatch.setattr(sft_module, "distill_sft", lambda *a, **k: calls.append((a, k)) or real(*a, **{**k, "steps": 2, "batch_size": 2}))
    for c in own:
        P = cycle_paths(c, tmp_path)
        P.mass_dir.mkdir(parents=True)
        for f in (P.rollouts, P.pool, P.solve_set, P.attempts, P.verdicts, P.mass_trajectories):
            write_jsonl(f, [])
        P.mass_champions.write_text("{}")
        ctx = StageContext(params, c, tmp_path)
        metrics = datasets(ctx)
        write_jsonl(P.mass_distill, own[c])
        shutil.copytree(tiny_model_dir, P.rl_model)
        calls.clear()
        trained = train_sft(ctx)
        if c == "c2":  # nothing of its own: no distillation (and no chats here: nothing trained)
            assert metrics["earlier_distilled"] == 4 and trained["distill_rows_earlier"] == 0
            assert not calls and trained["sft_trained"] == 0
            continue
        (_, rows, _, _), k = calls[0]
        if c == "c1":
            assert [r.id for r in k["turns"]] == ["c1-turn"]
        if c == "c3":
            assert [r.id for r in read_jsonl(P.earlier_distilled, Rollout)] == [r.id for r in own["c1"]]
            assert [r.id for r in rows] == [r.id for r in own["c3"] + own["c1"][:3]]


def test_train_rl_keeps_the_earlier_cycles_distilled_rows_among_its_labels(tmp_path, monkeypatch):
    """Expert iteration draws its labelled share from this cycle's self-labels, the earlier ones,
    and the Solver rows earlier cycles distilled (not the team's own turns): without them the run
    trained the distilled chains away and the guard refused it in every later cycle measured."""
    from selfevolve.config import CycleSpec, Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import read_jsonl, write_jsonl
    from selfevolve.stages.base import seeds
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import train_rl
    from selfevolve.training import expert_iteration

    params = Params()
    params.cycles = {"c1": CycleSpec(init="base"), "c2": CycleSpec(init="c1")}
    seeds(StageContext(params, "base", tmp_path))
    base, P = cycle_paths("base", tmp_path), cycle_paths("c2", tmp_path)
    write_jsonl(base.replay, _rows(4, "Compute {i} - {i}.", "<answer>0</answer>", "warm_start"))
    P.self_labels.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(P.self_labels, _rows(2, "Compute {i}000 + {i}.", "<answer>{s}</answer>", "self_label"))
    write_jsonl(P.earlier_labels, [r.model_copy(update={"id": f"old-{r.id}"}) for r in _rows(1, "Compute {i}00 + {i}.", "<answer>{s}</answer>", "self_label")])
    team = _rows(3, "Compute {i}00000 + {i}.", "<think>splitter {i}</think><answer>{s}</answer>", DISTILL_SOURCE)
    turn = Rollout(id="c1-turn", role="solver", group="q9", question_id="q9", prompt="Solve the part below.\nLow part: 9 + 9",
                   completion="<answer>18</answer>", reward=1.0, detail={"source": DISTILL_SOURCE, "by": TEAM_TURN})
    write_jsonl(P.earlier_distilled, [r.model_copy(update={"detail": {**r.detail, "by": "team"}}) for r in team] + [turn])
    write_jsonl(P.rl_dataset, [])
    seen = {}

    def fake(model_dir, labels, replay, others, validate, config, out_dir, on_step=None):
        seen.update(model=str(model_dir), labels=[r.id for r in labels], replay=[r.id for r in replay])
        return {"trained": False}

    monkeypatch.setattr(expert_iteration, "train_expert_iteration", fake)
    train_rl(StageContext(params, "c2", tmp_path))
    assert seen["model"].endswith("c1")
    assert sorted(seen["labels"]) == sorted(["self_label-0", "self_label-1", "old-self_label-0", *(r.id for r in team)])
    assert "c1-turn" not in seen["labels"] + seen["replay"] and len(seen["replay"]) == 4


def test_mass_search_asks_the_ladder_a_digit_past_what_earlier_cycles_distilled(tmp_path, monkeypatch):
    """The stage hands the forms its start and every cycle before it distilled to ``ladder_forms``:
    a pool of short sums after a cycle that distilled 7+3 asks for 8-digit forms."""
    from selfevolve.config import CycleSpec, Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import write_jsonl
    from selfevolve.stages import mass as stage
    from selfevolve.stages.base import seeds
    from selfevolve.stages.context import StageContext

    params = Params()
    params.cycles = {"c1": CycleSpec(init="base"), "c2": CycleSpec(init="c1")}
    seeds(StageContext(params, "base", tmp_path))
    c1, P = cycle_paths("c1", tmp_path), cycle_paths("c2", tmp_path)
    c1.mass_dir.mkdir(parents=True)
    seven = _rows(1, "Compute {i}000000 + {i}00.", "<answer>{s}</answer>", DISTILL_SOURCE)[0]
    write_jsonl(c1.mass_distill, [seven.model_copy(update={"detail": {**seven.detail, "form": "7+3", "by": "team"}})])
    write_jsonl(c1.earlier_distilled, [])
    P.pool.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(P.pool, arith.generate(10, seed=1, forms=["2+2", "4+1"]))
    asked = []

    class Asked(Exception):
        pass

    monkeypatch.setattr(stage, "ladder_forms", lambda *a, **kw: asked.append(ladder_forms(*a, **kw)) or asked[-1])
    monkeypatch.setattr(stage, "where_designs_differ", lambda *a: (_ for _ in ()).throw(Asked()))
    with pytest.raises(Asked):
        stage.mass_search(StageContext(params, "c2", tmp_path))
    assert asked[0][-1] == "8+8" and "8+3" in asked[0]
    assert {"6+1", "1+8", "8+2"} <= set(asked[0])  # short partners: a 9+3 sum's high part is 6 digits + 0
    write_jsonl(c1.mass_distill, [])
    with pytest.raises(Asked):
        stage.mass_search(StageContext(params, "c2", tmp_path))
    assert asked[1][-1] == "5+5"  # the pool's 4 digits, one past

    # the probes and the distilled runs get the budget held-out answers get, not the agents' calls'
    import contextlib
    from types import SimpleNamespace

    def distill_asked(*a, **kw):
        asked.append(kw)
        raise Asked()

    params.evaluation.max_new_tokens, params.sampling.max_new_tokens = 333, 222
    monkeypatch.setattr(stage, "where_designs_differ", lambda *a: [])
    monkeypatch.setattr(stage, "search_and_collect", lambda *a, **kw: SimpleNamespace(result=SimpleNamespace(team=lambda d: None)))
    monkeypatch.setattr(stage, "distill", distill_asked)
    ctx = StageContext(params, "c2", tmp_path)
    monkeypatch.setattr(ctx, "backend", lambda: contextlib.nullcontext(None))
    with pytest.raises(Asked):
        stage.mass_search(ctx)
    assert asked[-1]["limits"].max_new_tokens == 333 and "max_new_tokens" not in asked[-1]  # one budget: sampler and executor cap


def one_pass_chain(a: int, b: int) -> str:
    """What a one pass that learned the split team's way writes for ``a + b`` (measured at seed 2's
    c3): its own flat scratchpad up to 4-digit operands, above that the team's chain, whose high
    part is again answered by one pass, so a 9-digit sum's chain nests a 6-digit one."""
    if max(len(str(a)), len(str(b))) <= 4:
        return arith.scratchpad([a, b], ["+"])
    padded, low, high = arith.split_parts(a, b)
    (la, lb), (ha, hb) = (map(int, part.split(" + ")) for part in (low, high))
    return (f"splitter {padded} <low>{low}</low><high>{high}</high> low {one_pass_chain(la, lb)} "
            f"high {one_pass_chain(ha, hb)} combiner {arith.combine_worked(la + lb, ha + hb)}")


def nested_world(prompt: str, j: int = 0) -> str:
    """:func:`split_world` with a Solver that answers sums of up to 6-digit operands in its chain
    (:func:`one_pass_chain`) and nothing longer."""
    solved = re.fullmatch(re.escape(template_instruction("solver")) + r"\nProblem: Compute (\d+) \+ (\d+)\.", prompt)
    if not solved:
        return split_world(prompt)
    a, b = map(int, solved.groups())
    return f"<think>{one_pass_chain(a, b)}</think><answer>{a + b}</answer>" if max(a, b) < 10 ** 6 else "<answer>0</answer>"


def test_the_default_budget_fits_a_distilled_chain_one_digit_past_the_held_out_ladder(tiny_model_dir):
    """Every answer the single pass learns from the team is a chain as long as the team's run: at
    256 new tokens the 8-digit chains were cut before the answer (seed 0's c8: 146 of 171 8-digit
    held-out sums, beyond 0.664 against 0.868 with room), and at 384 the nested ones (8+7 .. 9+9,
    390-430 tokens): seed 2's c3 answered 9+7 1.00 with room and 0 on held-out. The default budget
    of evaluation (held-out, validation and the distillation's probes) holds the chain of the
    longest ladder the defaults distil: the held-out ladder's top and one digit more
    (``ladder_forms``' ``beyond``), where the part solver is one pass answering in its own chain
    (:func:`nested_world`); the agents' calls keep ``sampling.max_new_tokens`` (below)."""
    from transformers import AutoTokenizer

    from selfevolve.config import Params
    from selfevolve.mass.distill import LADDER_BEYOND

    params, tok = Params(), AutoTokenizer.from_pretrained(tiny_model_dir)
    top = max(params.seeds.arith.reach_levels) + LADDER_BEYOND
    rows, report = run(split_solver_combine(), [f"{top}+{top}"], 8, probe=8, world=nested_world)
    team = [r.completion for r in rows if r.detail["by"] == "team"]
    assert report["by_form"][f"{top}+{top}"] == {"n": 8, "team": 1.0, "one_pass": 0.0} and len(team) == 8
    assert all(c.count("splitter") == 2 and c.count("combiner") == 2 for c in team)  # nested: the high part's own chain
    lengths = [len(tok(c)["input_ids"]) for c in team]
    assert max(lengths) > 384  # what the old budget cut
    assert max(lengths) < params.evaluation.max_new_tokens


def test_the_seed_designs_pass_the_guardrails_under_the_default_params():
    """The search refuses a design whose calls times the per-call budget exceed
    ``mass.max_tokens_per_run`` or whose worst context exceeds ``model.max_model_len``: raising
    ``sampling.max_new_tokens`` to 384 alone made the split team (4 calls) fail both, and seed 0's
    c9 searched without it. Every seed design must pass with the default budgets."""
    from selfevolve.config import Params
    from selfevolve.mass.design import DesignLimits, seed_designs, validate_design

    params = Params()
    for chars_per_token in (2.5, 3.4, 4.0):  # what the search measures on the embedded tokenizer: ~3.4
        limits = DesignLimits.from_params(params.mass, max_model_len=params.model.max_model_len,
                                          max_new_tokens=params.sampling.max_new_tokens,
                                          chars_per_token=chars_per_token)
        checked = {d.name: validate_design(d, limits) for d in seed_designs("math")}
        assert checked["split_solver_combine"] == (True, "ok") and checked["single_agent"] == (True, "ok"), checked
