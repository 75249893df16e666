"""The embedded model: exact tokenizer round trip, tags as normal tokens, loadable with Auto*
classes, and a deterministic bootstrap for a given seed."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selfevolve.config import Params
from selfevolve.embedded.transcripts import arith_transcripts


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from selfevolve.embedded.warm_start import run_bootstrap

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 3, 200, 8, 2
    out = tmp_path_factory.mktemp("boot")
    s1, rows = run_bootstrap(p, out / "a")
    s2, _ = run_bootstrap(p, out / "b")
    # the transcripts, then the split round's rows (2 steps x 8 rows x split_share 0.5): replayed with them
    assert len(rows) == 208 and {r.role for r in rows} == {"solver", "challenger", "planner", "critic"}
    assert all(r.id.startswith("split-") for r in rows[200:]) and s1["steps"] == 5
    return out, s1, s2


def test_bootstrap_loads_with_auto_classes(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, s1, _ = built
    model = AutoModelForCausalLM.from_pretrained(out / "a")
    tok = AutoTokenizer.from_pretrained(out / "a")
    assert model.config.model_type == "llama" and s1["parameters"] == model.num_parameters()
    ids = tok.apply_chat_template([{"role": "user", "content": "Compute 1 + 2."}], add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)
    gen = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert gen.shape[1] > ids["input_ids"].shape[1]


def test_bootstrap_is_deterministic(built):
    import torch
    from safetensors.torch import load_file

    out, s1, s2 = built
    a, b = load_file(out / "a" / "model.safetensors"), load_file(out / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (out / "a" / "tokenizer.json").read_text() == (out / "b" / "tokenizer.json").read_text()
    assert s1["final_loss"] == s2["final_loss"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_tokenizer_round_trips_any_text(text):
    tok = _tok()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text


def test_tags_are_normal_tokens_and_digits_split():
    tok = _tok()
    text = "<answer>1234</answer>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert [tok.decode([i]) for i in tok("1234", add_special_tokens=False)["input_ids"]] == ["1", "2", "3", "4"]


def test_assistant_mask_covers_exactly_the_reply():
    tok = _tok()
    chat = [{"role": "user", "content": "Compute 2 + 3."}, {"role": "assistant", "content": "<answer>5</answer>"}]
    d = tok.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    kept = [i for i, m in zip(d["input_ids"], d["assistant_masks"]) if m]
    assert tok.decode(kept) == "<answer>5</answer><|eos|>"


_TOK = []


def _tok():
    if not _TOK:
        from selfevolve.embedded.tinymodel import build_tokenizer

        _TOK.append(build_tokenizer([m["content"] for _, t in arith_transcripts(300) for m in t], vocab_size=512))
    return _TOK[0]


def test_warm_start_keeps_going_until_the_frontier_is_partly_solvable(tmp_path):
    """A probe below ``bootstrap.min_frontier_pass`` buys extra rounds (each of ``extra_steps``),
    until it is reached or ``extra_rounds`` are spent; the probe sees the model being trained, and
    the round with the best probe is the model saved (more training can lose a foothold)."""
    import torch
    from safetensors.torch import load_file

    from selfevolve.embedded.warm_start import run_bootstrap

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 3, 100, 4, 0
    p.bootstrap.min_frontier_pass, p.bootstrap.extra_rounds, p.bootstrap.extra_steps = 0.2, 3, 2
    seen, answers = [], iter([0.0, 0.1, 0.25, 0.9])

    def probe(model, tok):
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return {"frontier_pass": next(answers), "seed_accuracy": None}

    summary, _ = run_bootstrap(p, tmp_path / "m", probe=probe)
    assert [r["frontier_pass"] for r in summary["rounds"]] == [0.0, 0.1, 0.25]
    assert [r["kept"] for r in summary["rounds"]] == [False, False, True]
    assert summary["extra_rounds"] == 2 and summary["steps"] == 3 + 2 * 2
    assert not torch.equal(seen[0]["model.norm.weight"], seen[2]["model.norm.weight"])  # the weights changed between checks

    # every extra round worse than the first: the first round's weights are saved
    p.bootstrap.extra_rounds = 2
    seen, answers = [], iter([0.1, 0.05, 0.0])
    summary, _ = run_bootstrap(p, tmp_path / "n", probe=probe)
    assert summary["extra_rounds"] == 2 and summary["steps"] == 7 and [r["kept"] for r in summary["rounds"]] == [True, False, False]
    saved = load_file(tmp_path / "n" / "model.safetensors")
    assert all(torch.equal(saved[k], seen[0][k]) for k in saved)


def _record_batches(monkeypatch) -> list[list]:
    """Every batch the warm start's ``fit`` draws, in order (training runs as usual)."""
    from selfevolve.training import loop

    batches: list[list] = []
    real_fit = loop.fit

    def recording_fit(model, tok, draw, **kw):
        return real_fit(model, tok, lambda rng: batches.append(draw(rng)) or batches[-1], **kw)

    monkeypatch.setattr(loop, "fit", recording_fit)
    return batches


def test_an_extra_round_after_missed_seed_forms_practises_the_failing_forms(tmp_path, monkeypatch):
    """After a check that misses ``min_seed_accuracy``, ``focus_share`` of the next round's rows are
    Solver transcripts of the forms that check found failing, weighted by their error; a round after
    a check that holds the seed forms trains on the transcripts alone."""
    from selfevolve.embedded import warm_start

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 2, 100, 50, 0
    p.bootstrap.min_frontier_pass, p.bootstrap.min_seed_accuracy, p.bootstrap.extra_rounds, p.bootstrap.extra_steps = 0.9, 0.95, 2, 2
    p.bootstrap.focus_share = 0.5
    batches = _record_batches(monkeypatch)
    checks = iter([{"frontier_pass": 0.0, "seed_accuracy": 0.7, "seed_forms": {"3+2": 0.0, "4+1": 0.75, "2+2": 1.0}},
                   {"frontier_pass": 0.0, "seed_accuracy": 0.97, "seed_forms": {"3+2": 0.9, "4+1": 1.0, "2+2": 1.0}},
                   {"frontier_pass": 0.0, "seed_accuracy": 0.97, "seed_forms": {}}])
    summary, _ = warm_start.run_bootstrap(p, tmp_path / "m", probe=lambda model, tok: next(checks))
    assert [r["focus"] for r in summary["rounds"][1:]] == [["3+2", "4+1"], []]
    per_round = [batches[:2], batches[2:4], batches[4:6]]
    focus_rows = [[r for b in rnd for r in b if r.id.startswith("focus")] for rnd in per_round]
    assert not focus_rows[0] and not focus_rows[2]          # the first 2,000-step round and the one after a good check
    assert 25 <= len(focus_rows[1]) <= 75                   # about half of 2 batches of 50
    asked = [r.prompt for r in focus_rows[1]]
    assert all(r.role == "solver" and "<answer>" in r.completion for r in focus_rows[1])
    # 3+2 (error 1.0) is drawn about 4x as often as 4+1 (error 0.25); 2+2 (held) never
    three_two = sum(bool(re.search(r"\b\d{3} \+ \d{2}\b", t)) for t in asked)
    assert three_two >= 0.6 * len(asked) and not any(re.search(r"\b\d{2} \+ \d{2}\b", t) for t in asked)
    assert warm_start.focus_forms({"frontier_pass": 0.0, "seed_accuracy": 0.96, "seed_forms": {"3+2": 0.5}}, p.bootstrap) == {}


def test_warm_start_keeps_a_round_that_holds_the_seed_forms_first(tmp_path):
    """Seed forms below ``bootstrap.min_seed_accuracy`` also buy extra rounds, and a round that holds
    them beats one with a better frontier that does not (a foothold on unmastered seed forms was the
    measured failure); when no round holds them, the frontier decides."""
    from selfevolve.embedded.warm_start import run_bootstrap

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 3, 100, 4, 0
    p.bootstrap.min_frontier_pass, p.bootstrap.min_seed_accuracy, p.bootstrap.extra_rounds, p.bootstrap.extra_steps = 0.2, 0.95, 3, 2

    def run(name, answers):
        answers = iter(answers)
        summary, _ = run_bootstrap(p, tmp_path / name, probe=lambda model, tok: dict(zip(("frontier_pass", "seed_accuracy"), next(answers))))
        return summary["rounds"]

    # frontier reached at once, seed forms not: train on; the round that holds them is kept, and it ends the search
    rounds = run("a", [(0.4, 0.80), (0.1, 0.90), (0.25, 0.97), (0.5, 0.99)])
    assert [r["kept"] for r in rounds] == [False, False, True] and rounds[2]["seed_accuracy"] == 0.97
    # a seed-holding round with no foothold beats a foothold on unmastered seed forms
    rounds = run("b", [(0.4, 0.80), (0.0, 0.96), (0.3, 0.90), (0.1, 0.90)])
    assert [r["kept"] for r in rounds] == [False, True, False, False]
    # none holds the seed forms: the best frontier is kept
    rounds = run("c", [(0.1, 0.80), (0.15, 0.85), (0.05, 0.90), (0.0, 0.93)])
    assert [r["kept"] for r in rounds] == [False, True, False, False]


def test_warm_start_transcripts_answer_only_questions_of_their_forms():
    """Nothing in the warm start supervises an answer outside its forms: every question a transcript
    answers (the Solver's, and the Challenger's new question with its answer) is of the warm-start
    forms; the Challenger still steps up beyond them (the question alone, no answer) and the Critic
    still sees questions one step up (a score of well-formedness, no answer)."""
    import re

    from selfevolve.questions import arith

    forms = arith.seed_forms()
    def form_of(text: str) -> str | None:
        found = arith.parse_expression(text.split("\n")[0].strip())
        return None if found is None else "+".join(str(len(str(x))) for x in found[0])

    stepped_out = outside_scored = 0
    for role, chat in arith_transcripts(3000, seed=5, forms=forms):
        prompt, reply = chat[0]["content"], chat[1]["content"]
        if role == "solver":
            assert form_of(prompt.rsplit("Problem:", 1)[1]) in forms
        elif role == "challenger":
            new = form_of(re.search(r"<question>(.*?)</question>", reply).group(1))
            assert ("<answer>" in reply) == (new in forms), reply
            stepped_out += new not in forms
        elif role == "critic" and "Plan:" not in prompt:
            shown = form_of(prompt.rsplit("Problem:", 1)[1])  # None for a corrupted question
            outside_scored += shown is not None and shown not in forms
    assert stepped_out > 20 and outside_scored > 5


def test_alignment_practice_aligns_long_operand_pairs_and_answers_no_sum():
    """``practice_share`` of the warm start aligns a sum's operands as a worked sum starts: the reply
    is the restated operands and the zero-padded aligned line of ``arith.scratchpad``, with no column
    step and no ``<answer>``; both operands' lengths are drawn on their own (two long operands meet,
    as in no seed form), the question is no arith expression, and the Solver's share pays for it; at
    ``practice_share`` 0 the transcripts are the default ones, draw for draw. ``bootstrap.practice_share``
    and ``bootstrap.restate_operands`` reach the warm start's transcripts."""
    import re

    from selfevolve.config import load_params
    from selfevolve.embedded.warm_start import warm_start_transcripts
    from selfevolve.questions import arith

    chats = arith_transcripts(4000, seed=2, practice_share=0.1, restate=True)
    practice = [c for _, c in chats if "Problem: Align " in c[0]["content"]]
    assert 0.08 < len(practice) / 4000 < 0.12
    long_pairs = padded_first = 0
    for chat in practice:
        question = chat[0]["content"].rsplit("Problem: ", 1)[1].strip()
        a, b = re.fullmatch(r"Align (\d+) \+ (\d+)\.", question).groups()
        width = max(len(a), len(b)) + (int(a) + int(b)) % 2
        assert chat[1]["content"] == f"<think>{a}+{b} {a.zfill(width)}+{b.zfill(width)}</think>"
        # the same head as the worked sum of the same operands
        assert arith.scratchpad([int(a), int(b)], ["+"], restate=True).startswith(f"{a}+{b} {a.zfill(width)}+{b.zfill(width)} ")
        assert arith.parse_expression(question) is None
        long_pairs += min(len(a), len(b)) >= 4
        padded_first += 3 <= len(a) < len(b)
    assert long_pairs > 20 and padded_first > 20
    plain = [c for _, c in arith_transcripts(500, seed=2, practice_share=0.2) if "Problem: Align " in c[0]["content"]]
    assert plain and all(re.fullmatch(r"<think>\d+\+\d+</think>", c[1]["content"]) for c in plain)
    solver = sum(role == "solver" for role, _ in chats) - len(practice)
    assert 0.57 < solver / 4000 < 0.63
    assert arith_transcripts(500, seed=2, practice_share=0.0) == arith_transcripts(500, seed=2)

    params = load_params(None, overrides={"bootstrap.transcripts": 300, "bootstrap.practice_share": 0.2,
                                          "bootstrap.restate_operands": True})
    out = warm_start_transcripts(params)
    assert any("Problem: Align " in c[0]["content"] for _, c in out)
    worked = [c[1]["content"] for _, c in out if "Problem: Compute " in c[0]["content"] and c[1]["content"].startswith("<think>")]
    assert worked and all(re.match(r"<think>(\d+)\+(\d+) 0*\1\+0*\2 ", w) for w in worked), worked[:3]


@pytest.mark.parametrize("encoding", ["none", "rope"])
def test_position_encoding_none_is_nope_and_survives_save_and_load(tmp_path, encoding):
    """With ``position_encoding: none`` a one-layer model's last output depends on the set of
    earlier tokens, not their order (no position signal but the causal mask), and the saved
    config.json reloads as the same model; with ``rope`` the order matters."""
    import torch
    from transformers import AutoModelForCausalLM

    from selfevolve.embedded.tinymodel import build_model

    tok = _tok()
    model = build_model(tok, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=0, position_encoding=encoding).eval()
    ids = tok("Compute 12 + 345.", add_special_tokens=False)["input_ids"]
    swapped = [ids[1], ids[0], *ids[2:]]
    with torch.no_grad():
        same = torch.allclose(model(torch.tensor([ids])).logits[0, -1], model(torch.tensor([swapped])).logits[0, -1], atol=1e-5)
    assert same == (encoding == "none")
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.allclose(again(torch.tensor([ids])).logits, model(torch.tensor([ids])).logits, atol=1e-6)
    with pytest.raises(ValueError, match="position_encoding"):
        build_model(tok, position_encoding="alibi")


def test_standing_takes_the_warm_starts_probe_instead_of_measuring_it_again(tmp_path, monkeypatch):
    """The bootstrap stage's standing measures greedy accuracy per validation split and the frontier's
    pass@k; the kept round's probe already measured pass@k and the seed forms on the same questions
    with the same seeds, so only the other splits' greedy passes run (without a probe, all do)."""
    import contextlib

    from selfevolve.evaluation import solve
    from selfevolve.questions import arith
    from selfevolve.records import write_jsonl
    from selfevolve.stages import base
    from selfevolve.stages.context import StageContext

    qs = (arith.generate(6, seed=1, split="seed", prefix="s") + arith.generate(4, seed=2, forms=["4+3"], split="frontier", prefix="f")
          + arith.generate(4, seed=3, forms=["5+5"], split="beyond", prefix="b"))
    write_jsonl(tmp_path / "data/cycles/base/val.jsonl", qs)
    calls = []

    def fake_evaluate(backend, questions, config, k=1, seed=0):
        calls.append((questions[0].split, k))
        return [], {"accuracy": 0.5, f"pass_at_{k}": 0.75}

    monkeypatch.setattr(solve, "evaluate_questions", fake_evaluate)
    monkeypatch.setattr(StageContext, "backend", lambda self, model=None: contextlib.nullcontext(None))
    ctx = StageContext(Params(), "base", tmp_path)
    k = ctx.params.bootstrap.frontier_k
    assert base.standing(ctx) == {"bootstrap_beyond_accuracy": 0.5, "bootstrap_frontier_accuracy": 0.5,
                                  f"bootstrap_frontier_pass_at_{k}": 0.75, "bootstrap_seed_accuracy": 0.5}
    assert sorted(calls) == sorted([("beyond", 1), ("frontier", 1), ("frontier", k), ("seed", 1)])
    calls.clear()
    out = base.standing(ctx, probed={"round": 1, "frontier_pass": 0.125, "seed_accuracy": 0.97, "kept": True})
    assert out[f"bootstrap_frontier_pass_at_{k}"] == 0.125 and out["bootstrap_seed_accuracy"] == 0.97
    assert out["bootstrap_frontier_accuracy"] == 0.5 and sorted(calls) == [("beyond", 1), ("frontier", 1)]


def test_the_warm_starts_probe_reports_seed_accuracy_per_form(tmp_path, monkeypatch):
    """``frontier_probe`` grades the seed split per form, so an extra round knows which forms to
    practise: a Solver that gets equal-length sums right and every other sum wrong reads 1.0 on
    those forms and 0.0 on the rest, and the overall accuracy is their question-weighted mean."""
    from selfevolve.backends.base import Completion
    from selfevolve.backends.hf import HFBackend
    from selfevolve.questions import arith
    from selfevolve.records import write_jsonl
    from selfevolve.stages import base
    from selfevolve.stages.context import StageContext

    class EqualLengthSolver:
        def chat(self, conversations, sampling):
            out = []
            for conv in conversations:
                a, b = re.findall(r"(\d+) \+ (\d+)", conv[-1]["content"])[-1]
                answer = int(a) + int(b) + (0 if len(a) == len(b) else 1)
                out.append([Completion(text=f"<answer>{answer}</answer>") for _ in range(sampling.n)])
            return out

    monkeypatch.setattr(HFBackend, "from_pretrained_objects", classmethod(lambda cls, model, tok: EqualLengthSolver()))
    seed = arith.generate(40, seed=1, forms=["2+2", "3+2", "3+3"], split="seed", prefix="s")
    write_jsonl(tmp_path / "data/cycles/base/val.jsonl", seed + arith.generate(4, seed=2, forms=["4+3"], split="frontier", prefix="f"))
    probe = base.frontier_probe(StageContext(Params(), "base", tmp_path))
    got = probe(None, None)
    assert got["seed_forms"] == {"2+2": 1.0, "3+2": 0.0, "3+3": 1.0} and got["frontier_pass"] == 0.0
    assert got["seed_accuracy"] == pytest.approx(sum(q.form != "3+2" for q in seed) / len(seed))


def test_a_pretrained_bases_replay_is_its_own_right_answers_on_the_forms_it_masters(tmp_path, monkeypatch):
    """``mastered_replay``: the base model answers the seed pool greedily; only forms it answers right
    at ``rl.mastered_accuracy`` or more give rows, and only their right answers in the Solver's
    format, each a Solver row on the Solver's prompt. A Solver that gets equal-length sums right
    except every fourth one (0.75 < 0.85) on 2+2, unequal-length ones wrong, and writes one right
    1+1 answer without its tags: 1+1's other right answers, nothing of 2+2 or 2+1. Off (0): nothing."""
    import contextlib
    import re

    from selfevolve.backends.base import Completion
    from selfevolve.questions import arith
    from selfevolve.records import write_jsonl
    from selfevolve.roles.templates import render
    from selfevolve.stages import base
    from selfevolve.stages.context import StageContext

    class Solver:
        def chat(self, conversations, sampling):
            assert sampling.temperature == 0.0
            out = []
            for conv in conversations:
                a, b = re.findall(r"(\d+) \+ (\d+)", conv[-1]["content"])[-1]
                total = int(a) + int(b) + (0 if len(a) == len(b) else 1)
                if len(a) == 2 and int(a) % 4 == 0:
                    total += 1
                text = f"<think>{a} + {b} = {total}</think>\n<answer>{total}</answer>"
                out.append([Completion(text=f"{total}" if (a, b) == first else text) for _ in range(sampling.n)])
            return out

    pool = arith.generate(24, seed=1, forms=["1+1", "2+1", "2+2"], split="seed", prefix="s")
    first = tuple(re.findall(r"(\d+) \+ (\d+)", next(q.text for q in pool if q.form == "1+1"))[-1])
    write_jsonl(tmp_path / "data/cycles/base/pool.jsonl", pool)
    monkeypatch.setattr(StageContext, "backend", lambda self, model=None: contextlib.nullcontext(Solver()))
    params = Params.model_validate({"bootstrap": {"replay_questions": 100}, "rl": {"mastered_accuracy": 0.85}})
    rows, counts = base.mastered_replay(StageContext(params, "base", tmp_path))
    ones = [q for q in pool if q.form == "1+1"]
    assert {r.question_id for r in rows} == {q.id for q in ones[1:]}
    assert counts == {"replay_questions_answered": 24, "replay_forms_mastered": 1, "replay_rows": len(ones) - 1}
    q = ones[1]
    row = next(r for r in rows if r.question_id == q.id)
    assert row.role == "solver" and row.reward == 1.0 and row.detail["source"] == "replay"
    assert row.prompt == render("solver", question=q.text, domain=q.domain, plan=None)
    assert row.completion.endswith(f"<answer>{q.spec.answer}</answer>")
    assert base.mastered_replay(StageContext(Params(), "base", tmp_path)) == ([], {})


def test_split_roles_teach_reading_and_seed_form_sums_only():
    """The warm start's split round (``warm_start.split_role_rows``) teaches the roles of the split
    workflow (``mass.design.split_solver_combine``) without supervising a sum beyond the seed forms:
    the splitter's reply is the problem's low and high parts (``arith.split_parts``) and no answer, for
    operands up to ``SPLIT_READ_DIGITS`` digits each, padded to 6 digits or the longer one's length
    (the parts are the Solver's own problems: no role of their own); a combiner is
    shown a seed-form problem with unrelated sums (high sums past 4 digits among them) and its
    answer is the ``join`` of its own steps (``arith.combine_sums``). As many rows as the round
    draws, none with ``split_steps`` 0 or another seed set."""
    import re

    from selfevolve.config import load_params
    from selfevolve.embedded.transcripts import SPLIT_READ_DIGITS
    from selfevolve.embedded.warm_start import split_role_rows
    from selfevolve.mass import design as D
    from selfevolve.questions import arith

    forms = arith.seed_forms()
    params = load_params(None, overrides={"bootstrap.split_steps": 100, "bootstrap.split_share": 0.5})
    rows = split_role_rows(params)
    assert len(rows) == 100 * params.bootstrap.batch_size // 2 and rows == split_role_rows(params)
    counts = {"splitter": 0, "combiner": 0}
    long_split = longer_than_6 = long_high = 0
    for row in rows:
        prompt, reply = row.prompt, row.completion
        head = prompt.split("\n")[0]
        assert row.role == "solver" and head in (D.SPLIT_INSTRUCTION, D.COMBINE_INSTRUCTION)
        a, b = map(int, re.search(r"Problem: Compute (\d+) \+ (\d+)\.", prompt).groups())
        (ha, la), (hb, lb) = divmod(a, 1000), divmod(b, 1000)
        width = max(6, len(str(a)), len(str(b)))
        pa, pb = str(a).zfill(width), str(b).zfill(width)  # both numbers padded to one width, zeros kept
        if head == D.SPLIT_INSTRUCTION:
            counts["splitter"] += 1
            assert max(len(str(a)), len(str(b))) <= SPLIT_READ_DIGITS
            assert reply == f"<think>{pa}+{pb}</think><low>{pa[-3:]} + {pb[-3:]}</low><high>{pa[:-3]} + {pb[:-3]}</high>"
            assert "<answer>" not in reply and (int(pa[-3:]), int(pb[-3:]), int(pa[:-3]), int(pb[:-3])) == (la, lb, ha, hb)
            long_split += min(len(str(a)), len(str(b))) >= 5
            longer_than_6 += width > 6
        else:
            counts["combiner"] += 1
            assert "+".join(str(len(str(n))) for n in (a, b)) in forms
            low, high = map(int, re.search(r"\nLow: (\d+)\nHigh: (\d+)$", prompt).groups())
            long_high += high >= 10_000
            assert reply.startswith(f"<think>high {high} low ")  # the prompt's last number copied first (December 6 (evening))
            h, rest = re.search(r"join (\d+) (\d+)</think>", reply).groups()
            assert reply.endswith(f"<answer>{int(h + rest)}</answer>") and int(h + rest) == arith.combine_sums(low, high)
    assert counts["combiner"] > counts["splitter"] > 200 and long_split > 20, counts
    assert longer_than_6 > 100 and long_high > 100, (longer_than_6, long_high)
    assert not split_role_rows(load_params(None, overrides={"bootstrap.split_steps": 0}))
    assert not split_role_rows(load_params(None, overrides={"seeds.set": "tiny-code"}))


def test_the_split_round_follows_the_warm_start_and_its_check_is_the_kept_one(tmp_path):
    """After the warm start (and any extra rounds) comes the split workflow's round: its steps extend
    the loss curve, the model is probed again, and that check is the kept one the base model's
    standing is read from."""
    from selfevolve.embedded.warm_start import run_bootstrap

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 2, 100, 4, 3
    checks = iter([{"frontier_pass": 0.5, "seed_accuracy": 1.0}, {"frontier_pass": 0.4, "seed_accuracy": 0.99}])
    summary, rows = run_bootstrap(p, tmp_path / "m", probe=lambda model, tok: next(checks))
    assert summary["steps"] == 5 and len(rows) == 100 + 6
    first, split = summary["rounds"]
    assert not first["kept"] and split["kept"] and split["split_roles"] and split["frontier_pass"] == 0.4
    assert summary["extra_rounds"] == 0  # the split round is not one of the extra rounds a missed check asks for


def test_the_split_round_trains_on_until_its_roles_hold_and_keeps_the_best(tmp_path):
    """A role below ``min_seed_accuracy`` on the role check buys another split round of
    ``extra_steps`` (up to ``extra_rounds``); the split round with the best weakest role (seed forms
    held first) is the saved model, and its role accuracies are in the summary. A check that holds at
    once adds nothing: the model is the one a run without the check saves."""
    import torch
    from safetensors.torch import load_file

    from selfevolve.embedded.warm_start import run_bootstrap

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 2, 100, 4, 3
    p.bootstrap.min_seed_accuracy, p.bootstrap.extra_rounds, p.bootstrap.extra_steps = 0.95, 3, 2
    seen = []

    def roles(answers):
        answers = iter(answers)

        def check(model, tok):
            seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            return next(answers)
        return check

    # a round that does not lift the weakest role ends the split rounds; the best one is kept
    checks = iter([{"frontier_pass": 0.5, "seed_accuracy": 1.0}] + [{"frontier_pass": 0.4, "seed_accuracy": 0.99}] * 4)
    summary, _ = run_bootstrap(p, tmp_path / "m", probe=lambda model, tok: next(checks), role_check=roles(
        [{"splitter": 1.0, "combiner": 0.4}, {"splitter": 0.97, "combiner": 0.8},
         {"splitter": 0.9, "combiner": 0.7}, {"splitter": 0.6, "combiner": 0.99}]))
    split = [r for r in summary["rounds"] if r.get("split_roles")]
    assert [r["steps"] for r in split] == [3, 2, 2] and summary["steps"] == 2 + 3 + 2 * 2
    assert [r["kept"] for r in summary["rounds"]] == [False, False, True, False]
    assert summary["split_rounds"] == 3 and summary["extra_rounds"] == 0
    assert summary["role_combiner_accuracy"] == 0.8 and summary["role_splitter_accuracy"] == 0.97
    saved = load_file(tmp_path / "m" / "model.safetensors")
    assert all(torch.equal(saved[k], seen[1][k]) for k in saved)  # the second split round's weights
    assert not torch.equal(seen[1]["model.norm.weight"], seen[2]["model.norm.weight"])

    # rounds that lift it go on to bootstrap.extra_rounds; one within a standard error (0.0154) of the best does not
    for combiners, kept in (([0.4, 0.6, 0.8, 0.9], 3), ([0.4, 0.41], 1)):
        seen.clear()
        checks = iter([{"frontier_pass": 0.5, "seed_accuracy": 1.0}] + [{"frontier_pass": 0.4, "seed_accuracy": 0.99}] * 4)
        summary, _ = run_bootstrap(p, tmp_path / f"x{kept}", probe=lambda model, tok: next(checks),
                                   role_check=roles([{"splitter": 1.0, "combiner": c} for c in combiners]))
        split = [r for r in summary["rounds"] if r.get("split_roles")]
        assert len(split) == len(combiners) == len(seen) and [r["kept"] for r in split].index(True) == kept

    # roles that hold at once: one split round, the same weights as a run without the check
    checks = iter([{"frontier_pass": 0.5, "seed_accuracy": 1.0}, {"frontier_pass": 0.4, "seed_accuracy": 0.99}] * 2)
    summary, _ = run_bootstrap(p, tmp_path / "a", probe=lambda model, tok: next(checks),
                               role_check=roles([{"splitter": 0.96, "combiner": 0.95}]))
    assert summary["split_rounds"] == 1 and summary["rounds"][-1]["kept"] and summary["steps"] == 5
    run_bootstrap(p, tmp_path / "b", probe=lambda model, tok: next(checks))
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)

    # a role within one standard error of the floor on the check's 200 transcripts (0.95 - 0.0154) holds; one below it does not
    for combiner, rounds in ((0.94, 1), (0.93, 2)):
        checks = iter([{"frontier_pass": 0.5, "seed_accuracy": 1.0}] + [{"frontier_pass": 0.4, "seed_accuracy": 0.99}] * 2)
        summary, _ = run_bootstrap(p, tmp_path / f"se{rounds}", probe=lambda model, tok: next(checks),
                                   role_check=roles([{"splitter": 0.99, "combiner": combiner}, {"splitter": 0.99, "combiner": 0.99}]))
        assert p.bootstrap.probe_questions == 200 and summary["split_rounds"] == rounds


def test_the_split_role_check_scores_each_role_on_what_follows_its_worked_steps(monkeypatch):
    """``split_role_check`` asks each role ``probe_questions`` fresh questions (the same ones at
    every check) and counts a reply right only when what follows ``</think>`` is the transcript's:
    a reply with the right worked steps and a wrong answer is wrong, other steps with the right answer right."""
    from selfevolve.backends.base import Completion
    from selfevolve.backends import hf
    from selfevolve.config import load_params
    from selfevolve.embedded.warm_start import split_role_check
    from selfevolve.mass import design as D
    from selfevolve.questions import arith

    p = load_params(None, overrides={"bootstrap.probe_questions": 160})
    asked = []

    class Replies:  # the splitter's steps, its parts wrong when the first number is odd; other steps with the right answer for the combiner
        def chat(self, conversations, sampling):
            assert sampling.temperature == 0.0 and all(len(c) == 1 and c[0]["role"] == "user" for c in conversations)
            asked.append([c[0]["content"] for c in conversations])
            out = []
            for c in conversations:
                text = c[0]["content"]
                if text.startswith(D.SPLIT_INSTRUCTION.strip()):
                    reply = _expected_split_reply(text)
                    if int(re.search(r"Compute (\d+) \+", text).group(1)) % 2:
                        reply = reply.replace("<high>", "<high>9")
                else:
                    low, high = (int(x) for x in re.search(r"Low: (\d+)\nHigh: (\d+)", text).groups())
                    reply = f"<think>no steps</think><answer>{arith.combine_sums(low, high)}</answer>"
                out.append([Completion(text=reply, finish_reason="stop", prompt_tokens=1, output_tokens=1)])
            return out

    monkeypatch.setattr(hf.HFBackend, "from_pretrained_objects", classmethod(lambda cls, model, tok: Replies()))

    class Tok:
        def __call__(self, text):
            return type("Enc", (), {"input_ids": list(text)})()

    check = split_role_check(p)
    got = check(None, Tok())
    first = asked[:]
    even = [int(re.search(r"Compute (\d+) \+", t).group(1)) % 2 == 0 for t in first[0]]
    cells = got.pop("cells")
    assert got == {"splitter": round(sum(even) / len(even), 4), "combiner": 1.0} and 0 < sum(even) < len(even)
    # per role and length: the combiner right in each of its cells, the splitter's cells its errors by width
    assert {c.split()[0] for c in cells} == {"splitter", "combiner"} and all(a == 1.0 for c, a in cells.items() if c.startswith("combiner"))
    assert 0 < min(a for c, a in cells.items() if c.startswith("splitter")) < 1
    check(None, Tok())
    assert asked[2:] == first and [len(a) for a in first] == [160, 160]
    assert split_role_check(load_params(None, overrides={"bootstrap.extra_rounds": 0})) is None
    assert split_role_check(load_params(None, overrides={"bootstrap.split_steps": 0})) is None


def test_an_extra_split_round_practises_the_cells_the_check_found_failing(tmp_path, monkeypatch):
    """After a split round whose check finds a role failing at one length (``role_cells``: seed 0's
    combiner on 7-digit answers), ``focus_share`` of the next round's split rows are transcripts of
    that cell, weighted by error; a cell that holds is not drawn on purpose, and a check without
    cells trains as before."""
    from selfevolve.embedded import warm_start

    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 2, 100, 50, 2
    p.bootstrap.min_seed_accuracy, p.bootstrap.extra_rounds, p.bootstrap.extra_steps = 0.95, 2, 2
    p.bootstrap.focus_share, p.bootstrap.split_share = 0.5, 1.0
    batches = _record_batches(monkeypatch)
    roles = iter([{"splitter": 1.0, "combiner": 0.8, "cells": {"combiner 7": 0.01, "combiner 5": 1.0, "splitter 3": 1.0}},
                  {"splitter": 1.0, "combiner": 0.97, "cells": {"combiner 7": 0.97}}])
    summary, _ = warm_start.run_bootstrap(p, tmp_path / "m", role_check=lambda model, tok: next(roles))
    split = [r for r in summary["rounds"] if r.get("split_roles")]
    assert split[0]["role_cells"] == {"combiner 7": 0.01, "combiner 5": 1.0, "splitter 3": 1.0}
    assert "cells" not in split[0]["roles"] and split[1]["focus"] == ["combiner 7"] and "focus" not in split[0]
    focus = [r for b in batches[4:6] for r in b if r.id.startswith("focus")]   # warm start, split round, extra round: 2 steps each
    assert len(batches) == 6 and not any(r.id.startswith("focus") for b in batches[:4] for r in b)
    assert 25 <= len(focus) <= 75                                          # about half of 2 batches of 50
    assert all(warm_start.split_cell("combiner", r.completion) == "combiner 7" for r in focus)
    assert warm_start.weak_cells({"role_cells": {"combiner 7": 0.5, "splitter 4": 0.96}}, p.bootstrap) == {"combiner 7": 0.5}
    assert warm_start.split_cell("splitter", "<think>0004050+0000542</think><low>050 + 542</low><high>0004 + 0000</high>") == "splitter 4"


def _expected_split_reply(prompt: str) -> str:
    from selfevolve.questions import arith

    a, b = (int(x) for x in re.search(r"Compute (\d+) \+ (\d+)\.", prompt).groups())
    return arith.split_reply(a, b)
