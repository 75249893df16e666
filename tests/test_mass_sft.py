"""MASS trajectories -> SFT chats (token-level mask check) and ``train_sft`` on the tiny model."""

from __future__ import annotations


import random

import pytest

from selfevolve.backends.base import Backend, Completion, SamplingConfig
from selfevolve.config import LoraParams, MassParams, Params, SFTParams
from selfevolve.evaluation.solve import SOLVER_PROMPT, build_messages
from selfevolve.mass.design import DesignLimits, planner_solver, planner_solver_review, single_agent
from selfevolve.mass.executor import run_design
from selfevolve.mass.search import search_and_collect
from selfevolve.mass.sft_data import chats_to_records, trajectories_to_chats
from selfevolve.mass.trajectories import collect_champion_trajectories, select_for_sft
from selfevolve.roles.templates import render
from selfevolve.questions import arith
from selfevolve.training.sft import assistant_token_mask, train_sft, with_replay


QUESTIONS = arith.generate(6, seed=21, levels=(1, 2))


# Torch on 1 thread in this module: on a shared 2-core machine, intra-op threads contending with
# other jobs made 3 tiny SFT steps take ~8 s instead of ~0.3 s.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class HalfRight(Backend):
    """Planner writes a plan; the solver is right on even-numbered questions only; reviews pass."""

    name = "half-right"

    def chat(self, conversations, sampling):
        out = []
        for conv in conversations:
            p = conv[-1]["content"]
            if "<design></design>" in p:
                text = "<design>not a design</design>"
            elif "Reply <score>" in p:
                text = "<score>8</score>"
            elif "<plan></plan>" in p:
                text = "<plan>1. add the digits</plan>"
            else:
                full = "\n".join(m["content"] for m in conv)
                q = next(q for q in QUESTIONS if f"Problem: {q.text}\n" in full + "\n")
                right = int(q.id.rsplit("-", 1)[1]) % 2 == 0
                text = f"<think>carry</think><answer>{q.answer if right else 'x'}</answer>"
            out.append([Completion(text=text, prompt_tokens=len(p) // 4, output_tokens=len(text.split()))
                        for _ in range(sampling.n)])
        return out


def verify(questions, answers):
    return [float(a == q.answer) for q, a in zip(questions, answers)]


def test_a_champion_run_becomes_the_single_passs_prompt_and_its_accepted_answer():
    """The chat is what the next cycle's single Solver sees (the Solver template, no plan), with the
    answer agent's output as the one assistant turn; not the planner's turn, not the workflow text.
    After a gate's re-delegation, the attempt the final answer was read from."""
    design = planner_solver()
    res = run_design(HalfRight(), design, QUESTIONS, limits=DesignLimits())
    chats = trajectories_to_chats(res.trajectories, QUESTIONS, {"math": design})
    assert len(chats) == len(QUESTIONS)
    for q, t, chat in zip(QUESTIONS, res.trajectories, chats):
        assert [m["role"] for m in chat] == ["user", "assistant"]
        assert chat[0]["content"] == build_messages(q, SOLVER_PROMPT)[-1]["content"]  # as evaluated: no Plan: line
        assert t.messages[0].content == render("planner", question=q.text)
        assert chat[1]["content"] == t.messages[3].content  # the solver's output, not the plan
    assert chats_to_records(chats[:1]) == [{"messages": chats[0]}]
    with pytest.raises(KeyError, match="not among"):
        trajectories_to_chats(res.trajectories, QUESTIONS[:1], {"math": design})
    with pytest.raises(KeyError, match="no champion"):
        trajectories_to_chats(res.trajectories, QUESTIONS, {})
    with pytest.raises(ValueError, match="ran design"):
        trajectories_to_chats(res.trajectories, QUESTIONS, {"math": single_agent()})

    class BothRejected(HalfRight):
        """The reviewer rejects both attempts, the first less firmly (4/10 against 2/10): the run's
        answer is the first attempt, though the re-delegated one came last."""

        def chat(self, conversations, sampling):
            out = super().chat(conversations, sampling)
            for conv, comps in zip(conversations, out):
                p = conv[-1]["content"]
                if "Reply <score>" in p:
                    comps[:] = [Completion(text="<score>2</score>" if "second" in p else "<score>4</score>", output_tokens=2)
                                for _ in comps]
                elif p.startswith("The reviewer rejected"):
                    comps[:] = [Completion(text="<think>second</think><answer>7</answer>", output_tokens=3) for _ in comps]
            return out

    gated = planner_solver_review()
    res = run_design(BothRejected(), gated, QUESTIONS[:1], limits=DesignLimits())
    solver_outputs = [m.content for m in res.trajectories[0].messages if m.role == "assistant" and m.agent_id == "solver"]
    assert len(solver_outputs) == 2 and res.trajectories[0].final_answer != "7"
    chat = trajectories_to_chats(res.trajectories, QUESTIONS[:1], {"math": gated})[0]
    assert chat[1]["content"] == solver_outputs[0]


def test_a_split_champion_trains_each_agent_on_its_own_turns():
    """The split workflow's answer agent is a combiner, not the Solver: its runs become one chat per
    DAG step in that agent's own context (Multiagent Finetuning), never the combiner's reply under
    the single pass's prompt (measured to break one pass). Each chat is the turn as it ran."""
    from helpers import split_world
    from selfevolve.mass import design as D
    from selfevolve.mass.design import Gate, split_solver_combine
    from selfevolve.mass.sft_data import solver_answers

    class Split(Backend):
        name = "split"

        def chat(self, conversations, sampling):
            return [[Completion(text=split_world(conv[-1]["content"]), output_tokens=3)] for conv in conversations]

    design = split_solver_combine()
    assert not solver_answers(design, "math")
    assert all(solver_answers(d, "math") for d in (single_agent(), planner_solver(), planner_solver_review()))
    qs = arith.generate(4, seed=3, forms=["5+4", "4+3"])
    res = run_design(Split(), design, qs, limits=DesignLimits(max_model_len=1024))
    assert [t.final_answer for t in res.trajectories] == [q.spec.answer for q in qs]
    chats = trajectories_to_chats(res.trajectories, qs, {"math": design})
    assert len(chats) == 4 * len(qs)
    solver_prompts = {build_messages(q, SOLVER_PROMPT)[-1]["content"] for q in qs}
    for t, run_chats in zip(res.trajectories, [chats[i:i + 4] for i in range(0, len(chats), 4)]):
        turns = [(m.content, n.content) for m, n in zip(t.messages, t.messages[1:]) if m.role == "user" and n.role == "assistant"]
        assert [(c[0]["content"], c[1]["content"]) for c in run_chats] == turns
        assert not {c[0]["content"] for c in run_chats} & solver_prompts
        assert f"<answer>{t.final_answer}</answer>" in run_chats[-1][1]["content"]  # the combiner's, in its context

    class Regated(Split):
        """The combiner's first answer is wrong and the reviewer rejects it; its re-delegated one is right."""

        def chat(self, conversations, sampling):
            out = []
            for conv in conversations:
                p = conv[-1]["content"]
                if "Reply <score>" in p:
                    text = "<score>9</score>" if "<answer>2000</answer>" in p else "<score>2</score>"
                elif p.startswith("The reviewer rejected"):
                    text = split_world(conv[-3]["content"])
                elif p.startswith(D.COMBINE_INSTRUCTION):
                    text = "<think>low</think><answer>0</answer>"
                else:
                    text = split_world(p)
                out.append([Completion(text=text, output_tokens=3)])
            return out

    gated = design.model_copy(update={"gate": Gate(reviewer="splitter", max_redelegations=1)})
    q = arith.generate(1, seed=5, forms=["4+3"])[0].model_copy(update={"text": "Compute 1500 + 500.", "spec": arith.MathSpec(answer="2000")})
    res = run_design(Regated(), gated, [q], limits=DesignLimits(max_model_len=1024, max_calls=8))
    t = res.trajectories[0]
    assert t.final_answer == "2000" and len([m for m in t.messages if m.agent_id == "combiner" and m.role == "assistant"]) == 2
    chats = trajectories_to_chats(res.trajectories, [q], {"math": gated})
    # the splitter's and part solvers' steps only: not the review, the re-delegation or the rejected answer
    solve = D.template_instruction("solver").split("\n")[0]
    assert [c[0]["content"].split("\n")[0] for c in chats] == [D.SPLIT_INSTRUCTION, solve, solve]


def test_sft_chats_are_mixed_with_replay_of_what_the_model_masters():
    """``fraction`` of the result is replay (the rows' prompt and completion as a chat), drawn
    without replacement and shuffled in; nothing is replayed at 0 or with no chats; seeded."""
    from selfevolve.records import Rollout

    chats = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(30)]
    rows = [Rollout(id=f"w{i}", role="solver", group=f"w{i}", question_id="", prompt=f"p{i}", completion=f"c{i}", reward=1.0) for i in range(500)]
    mixed = with_replay(chats, rows, 0.5, random.Random(0))
    replayed = [c for c in mixed if c[0]["content"].startswith("p")]
    assert len(mixed) == 60 and len(replayed) == 30 and all(c in mixed for c in chats)
    assert len({c[0]["content"] for c in replayed}) == 30
    assert all(c[1]["content"] == "c" + c[0]["content"][1:] for c in replayed)
    assert mixed[:30] != chats and mixed == with_replay(chats, rows, 0.5, random.Random(0))
    assert len(with_replay(chats, rows, 0.25, random.Random(0))) == 40
    assert len(with_replay(chats, rows[:5], 0.5, random.Random(0))) == 35  # all the rows there are
    assert sorted(map(str, with_replay(chats, rows, 0.0, random.Random(0)))) == sorted(map(str, chats))
    assert with_replay([], rows, 0.5, random.Random(0)) == []
    with pytest.raises(ValueError, match="replay fraction"):
        with_replay(chats, rows, 1.0, random.Random(0))


def test_collect_keeps_completed_and_verified_runs_only():
    trajs = collect_champion_trajectories(HalfRight(), {"math": planner_solver_review()}, QUESTIONS, verify, samples=2,
                                          limits=DesignLimits())
    assert len(trajs) == 2 * len(QUESTIONS)
    kept = select_for_sft(trajs)
    assert kept and all(t.completed and t.correct == 1.0 for t in kept)
    assert {t.question_id for t in kept} == {q.id for q in QUESTIONS if int(q.id.rsplit("-", 1)[1]) % 2 == 0}
    assert len(kept) == len(trajs) // 2
    assert all(t.correct == 0.0 for t in trajs if t not in kept)


def test_sft_mask_covers_exactly_the_assistant_tokens(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    trajs = collect_champion_trajectories(HalfRight(), {"math": planner_solver_review()}, QUESTIONS, verify, samples=1,
                                          limits=DesignLimits())
    chats = trajectories_to_chats(select_for_sft(trajs), QUESTIONS, {"math": planner_solver_review()})
    assert chats
    for chat in chats:
        ids, mask = assistant_token_mask(tok, chat)
        assert len(ids) == len(mask)
        kept = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
        assert kept == "".join(m["content"] + tok.eos_token for m in chat if m["role"] == "assistant")
        masked = tok.decode([i for i, m in zip(ids, mask) if not m], skip_special_tokens=False)
        for m in chat:
            if m["role"] != "assistant":
                assert m["content"] in masked
        # the whole sequence is exactly the chat template's rendering
        assert tok.decode(ids, skip_special_tokens=False) == tok.apply_chat_template(chat, tokenize=False)
    with pytest.raises(ValueError, match="generation"):
        tok2 = AutoTokenizer.from_pretrained(tiny_model_dir)
        tok2.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        assistant_token_mask(tok2, chats[0])


def _weights(path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    return model, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("lora_enabled", [True, False])
def test_train_sft_runs_and_saves_a_loadable_model(tiny_model_dir, tmp_path, lora_enabled):
    trajs = collect_champion_trajectories(HalfRight(), {"math": planner_solver()}, QUESTIONS, verify, samples=1,
                                          limits=DesignLimits())
    chats = trajectories_to_chats(select_for_sft(trajs), QUESTIONS, {"math": planner_solver()})
    out = tmp_path / "sft"
    lora = LoraParams(enabled=lora_enabled, r=4, alpha=8, dropout=0.0)
    summary = train_sft(tiny_model_dir, chats, out, SFTParams(steps=3, batch_size=2, learning_rate=1e-2), lora, seed=0)
    assert summary["trained"] and summary["steps"] == 3 and summary["lora"] == lora_enabled
    assert summary["train_loss"] is not None and summary["assistant_tokens"] > 0
    assert summary["assistant_tokens"] < summary["total_tokens"]
    model, after = _weights(out)
    _, before = _weights(tiny_model_dir)
    assert set(after) == set(before)  # a plain model dir (LoRA merged), same parameters
    assert any(not (after[k] == before[k]).all() for k in before)
    assert not any("lora" in k for k in after)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out).chat_template == AutoTokenizer.from_pretrained(tiny_model_dir).chat_template


def test_train_sft_with_no_chats_copies_the_model(tiny_model_dir, tmp_path):
    summary = train_sft(tiny_model_dir, [], tmp_path / "copy", SFTParams(), LoraParams(), seed=0)
    assert summary["trained"] is False and "no chats" in summary["reason"]
    _, after = _weights(tmp_path / "copy")
    _, before = _weights(tiny_model_dir)
    assert all((after[k] == before[k]).all() for k in before)


def test_search_and_collect_finds_champions_and_keeps_verified_trajectories():
    params = Params(mass=MassParams(generations=1, population=3, eval_questions=4, trajectories_per_question=2))
    run = dict(sampling=SamplingConfig(temperature=params.sampling.temperature, max_new_tokens=params.sampling.max_new_tokens),
               max_model_len=params.model.max_model_len)
    outcome = search_and_collect(HalfRight(), QUESTIONS, params.mass, verify, seed=0, **run)
    champions, metrics, kept = outcome.champions_json(), outcome.metrics, outcome.trajectories
    assert set(champions) == {"math"} and outcome.result.model_dump(mode="json")["champions"]["math"] == champions["math"]
    assert kept and all(t.completed and t.correct == 1.0 for t in kept)
    assert metrics["mass_trajectories_kept"] == len(kept) and metrics["mass_trajectories"] == 2 * len(QUESTIONS)
    assert 0.0 <= metrics["mass_math_accuracy"] <= 1.0 and "mass_math_single_agent_accuracy" in metrics
    assert trajectories_to_chats(kept, {q.id: q for q in QUESTIONS}, outcome.result.champions)
    # next cycle: the champion comes back as previous_champions
    again = search_and_collect(HalfRight(), QUESTIONS, params.mass, verify, seed=1, previous_champions=champions, **run)
    assert again.metrics["mass_designs_evaluated"] >= 3
    assert single_agent().design_id in {e.design_id for e in again.result.evaluated}


SMOLLM2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
                    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
                    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_a_chatml_template_without_generation_markers_is_patched_to_render_the_same(tiny_model_dir):
    from transformers import AutoTokenizer

    from selfevolve.training.sft import training_chat_template

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert training_chat_template(tok) is None  # the tiny model's own template has the markers
    tok.chat_template = SMOLLM2_TEMPLATE  # SmolLM2-Instruct's, verbatim
    patched = training_chat_template(tok)
    chat = [{"role": "user", "content": "Compute 1 + 2."}, {"role": "assistant", "content": "<answer>3</answer>"}]
    assert tok.apply_chat_template(chat, tokenize=False, chat_template=patched) == tok.apply_chat_template(chat, tokenize=False)
    tok.chat_template = patched
    ids, mask = assistant_token_mask(tok, chat)
    assert tok.decode([i for i, m in zip(ids, mask) if m]).replace(" ", "") == "<answer>3</answer><|im_end|>"
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ValueError, match="generation"):
        training_chat_template(tok)
