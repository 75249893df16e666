"""Task-Relative REINFORCE++: per-role advantages, and one update moves log-probs the right way."""

import pytest

from selfevolve.training.advantages import role_advantages
from selfevolve.config import Params
from selfevolve.records import Rollout
from selfevolve.training import batches, rl
from selfevolve.training.config import TrainConfig


def _r(i, role, group, reward):
    return Rollout(id=f"r{i}", role=role, group=group, question_id="q", prompt="Compute 1 + 2.", completion=f"<answer>{i}</answer>",
                   reward=reward)


def test_role_advantages_normalise_per_role_and_skip_flat_groups():
    rows = [_r(0, "solver", "g1", 1.0), _r(1, "solver", "g1", 0.0), _r(2, "solver", "g2", 0.5), _r(3, "solver", "g2", 0.5),
            _r(4, "planner", "p1", 0.9), _r(5, "planner", "p2", 0.1), _r(6, "critic", "c1", 1.0), _r(7, "critic", "c2", 1.0)]
    out = {r.id: r.advantage for r in role_advantages(rows)}
    assert set(out) == {"r0", "r1", "r4", "r5"}  # g2 has no spread; critic rewards have no spread
    assert out["r0"] == pytest.approx(1.0, abs=1e-4) and out["r1"] == pytest.approx(-1.0, abs=1e-4)
    assert out["r4"] == pytest.approx(1.0, abs=1e-4) and out["r5"] == pytest.approx(-1.0, abs=1e-4)
    assert len(role_advantages(rows, skip_no_spread=False)) == 6


def test_one_update_raises_positive_and_lowers_negative(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    params = Params()
    params.rl.learning_rate = 1e-3
    good = Rollout(id="good", role="solver", group="g", question_id="q", prompt="Compute 2 + 2.", completion="<answer>4</answer>",
                   reward=1.0, advantage=1.0)
    bad = Rollout(id="bad", role="solver", group="g", question_id="q", prompt="Compute 2 + 2.", completion="<answer>5</answer>",
                  reward=0.0, advantage=-1.0)
    batch = [good, bad]

    def seq_logp():
        ids, attn, cmask = batches.build_batch(tok, batch, 512)
        with torch.no_grad():
            lp = batches.token_logprobs(model, ids, attn)
        return (lp * cmask).sum(1)

    before = seq_logp()
    old = rl.behaviour_logprobs(model, tok, batch, 512, temperature=params.sampling.temperature)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss, stats = rl.policy_update(model, opt, tok, batch, old, TrainConfig.from_params(params))
    after = seq_logp()
    assert after[0] > before[0], (before, after)
    assert after[1] < before[1], (before, after)
    assert stats["clip_frac"] == 0.0  # first step is on-policy: ratio 1


def test_logprobs_are_those_of_the_policy_at_the_sampling_temperature(tiny_model_dir):
    """The rollouts were drawn from softmax(logits / T): the ratio must use the same distribution,
    else the first update is already off-policy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids, attn, cmask = batches.build_batch(tok, [_r(0, "solver", "g", 1.0)], 512)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        for t in (0.5, 1.0, 2.0):
            want = torch.log_softmax(logits / t, -1).gather(2, ids[:, 1:, None]).squeeze(-1)
            assert torch.allclose(batches.token_logprobs(model, ids, attn, t), want, atol=1e-5)
        assert not torch.allclose(batches.token_logprobs(model, ids, attn, 0.5), batches.token_logprobs(model, ids, attn, 1.0))
        assert torch.allclose(batches.token_logprobs(model, ids, attn, 0.0), batches.token_logprobs(model, ids, attn, 1.0))  # greedy: raw logits
    old = rl.behaviour_logprobs(model, tok, [_r(0, "solver", "g", 1.0)], 512, temperature=0.5)
    assert torch.allclose(old["r0"], batches.token_logprobs(model, ids, attn, 0.5)[0, : int(attn[0].sum()) - 1], atol=1e-5)


def test_clipped_surrogate_stops_gradient_beyond_clip():
    import torch

    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0]])  # ratio e > 1 + eps
    loss, stats = rl.reinforce_pp_loss(logp, old, old, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2)
    loss.backward()
    assert torch.all(logp.grad == 0) and stats["clip_frac"] == 1.0


@pytest.mark.slow
def test_grpo_trains_and_keeps_the_best_checkpoint(tiny_model_dir, tmp_path):
    import json

    from transformers import AutoModelForCausalLM

    from selfevolve.questions import arith

    params = Params()
    params.rl.algorithm = "grpo"
    params.rl.steps, params.rl.batch_size, params.rl.grpo_num_generations = 2, 4, 2
    params.rl.eval_every, params.rl.eval_questions = 1, 2
    params.sampling.max_new_tokens = params.evaluation.max_new_tokens = 8
    from selfevolve.backends.hf import HFBackend
    from selfevolve.evaluation.solve import SolveConfig, correctness

    qs = arith.generate(4, seed=1, levels=(1,))
    validated = []

    def validate(model, tokenizer):
        validated.append(1)
        return correctness(HFBackend.from_pretrained_objects(model, tokenizer), qs[:2], SolveConfig.from_params(params))

    summary = rl.train_grpo(tiny_model_dir, qs, validate, TrainConfig.from_params(params), tmp_path / "out")
    assert len(validated) == 3
    assert summary["trained"] and summary["algorithm"] == "grpo"
    assert [p["step"] for p in summary["val_curve"]] == [0, 1, 2]
    assert json.loads((tmp_path / "out" / "rl.json").read_text())["best_step"] == summary["best_step"]
    AutoModelForCausalLM.from_pretrained(tmp_path / "out")


def test_checkpoint_selection_takes_only_significant_validation_gains():
    """Step 0 is kept against a gain inside the noise (+3 of 100 questions, McNemar p ~ 0.25), is
    replaced by a significant one (+20), and that by a higher significant one; select_p = 1 falls
    back to plain best accuracy."""
    import torch

    start = [1] * 50 + [0] * 50
    noise = [1] * 53 + [0] * 47
    big = [1] * 70 + [0] * 30
    outcomes = iter([start, noise, big, [1] * 71 + [0] * 29])
    model = torch.nn.Linear(2, 1)
    sig = Params()
    sig.rl.selection = "significant"
    sel = rl.CheckpointSelector(model, None, lambda m, tok: next(outcomes), sig.rl)
    for step in (0, 10, 20):
        with torch.no_grad():
            model.weight.fill_(float(step))
        sel.check(step)
    assert sel.curve[1]["p_vs_start"] > 0.05 and sel.best_step == 20 and sel.best_accuracy == 0.7
    assert sel.curve[2]["p_vs_start"] < 0.05 and torch.all(sel.best_state["weight"] == 20.0)
    sel.check(30)  # 0.71: best so far and significant -> taken
    assert sel.best_step == 30

    params = Params()
    params.rl.selection, params.rl.select_p = "significant", 1.0
    seq = iter([start, noise])
    plain = rl.CheckpointSelector(model, None, lambda m, tok: next(seq), params.rl)
    plain.check(0)
    plain.check(10)
    assert plain.best_step == 10  # without the test, +3 of 100 would be taken


def test_checkpoint_selection_corrects_for_the_number_of_checks():
    """With 4 checks per run (80 steps, every 20) a gain needs p < 0.05 / 4: +7 of 100 questions
    (p = 0.0156) is not taken, +8 (p = 0.0078) is; with one check +7 is taken."""
    import torch

    start = [1] * 50 + [0] * 50
    model = torch.nn.Linear(2, 1)
    for steps, gain, taken in ((80, 7, False), (80, 8, True), (20, 7, True)):
        params = Params()
        params.rl.selection = "significant"
        params.rl.steps, params.rl.eval_every = steps, 20
        seq = iter([start, [1] * (50 + gain) + [0] * (50 - gain)])
        sel = rl.CheckpointSelector(model, None, lambda m, tok, seq=seq: next(seq), params.rl)
        sel.check(0)
        sel.check(20)
        assert (sel.best_step == 20) is taken, (steps, gain, sel.curve)


def test_weight_average_is_an_exponential_moving_average_of_the_updates():
    import torch

    assert rl.weight_average(torch.nn.Linear(2, 1), 0.0) is None
    lin = torch.nn.Linear(2, 1, bias=False)
    avg = rl.weight_average(lin, 0.75)
    seen = []
    for value in (1.0, 2.0, 4.0):
        with torch.no_grad():
            lin.weight.fill_(value)
        avg.update_parameters(lin)
        seen.append(avg.module.weight[0, 0].item())
    # the first update copies, then w_avg <- 0.75 w_avg + 0.25 w
    assert seen == pytest.approx([1.0, 0.75 * 1.0 + 0.25 * 2.0, 0.75 * 1.25 + 0.25 * 4.0])
    assert lin.weight[0, 0].item() == 4.0  # the trained model itself is untouched


def test_warmup_schedule_ramps_linearly_then_holds():
    import torch

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = rl.warmup_schedule(opt, 4)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_train_reinforce_pp_keeps_the_weight_average_not_the_last_update(tiny_model_dir, tmp_path, monkeypatch):
    """With the last check the best, the saved model is the moving average of the weights, which
    differs from the raw weights after the last update."""
    import torch
    from transformers import AutoModelForCausalLM

    made = {}
    real_average, real_update = rl.weight_average, rl.policy_update

    def spy_average(model, decay):
        made["avg"] = real_average(model, decay)
        return made["avg"]

    def spy_update(model, *args):
        out = real_update(model, *args)
        made["raw"] = {k: v.detach().clone() for k, v in model.state_dict().items()}  # after the last update
        return out

    monkeypatch.setattr(rl, "weight_average", spy_average)
    monkeypatch.setattr(rl, "policy_update", spy_update)
    right = iter([1, 5, 9])  # of 10 validation questions at steps 0, 2, 4

    def validate(model, tokenizer):
        k = next(right)
        return [1] * k + [0] * (10 - k)

    params = Params()
    params.rl.steps, params.rl.eval_every, params.rl.batch_size = 4, 2, 4
    params.rl.learning_rate, params.rl.ema_decay, params.rl.select_p = 1e-2, 0.5, 1.0
    rows = role_advantages([_r(i, "solver", f"g{i // 2}", float(i % 2)) for i in range(8)])
    summary = rl.train_reinforce_pp(tiny_model_dir, rows, validate, TrainConfig.from_params(params), tmp_path / "out")
    assert summary["best_step"] == 4
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    avg, raw = made["avg"].module.state_dict(), made["raw"]
    name = next(k for k, v in raw.items() if v.is_floating_point() and not torch.equal(v, avg[k]))
    assert torch.allclose(saved[name], avg[name]) and not torch.allclose(saved[name], raw[name])


def _select(start, candidate, forms, tolerance=0.01, slack=0, mastered=0.9):
    import torch

    seq = iter([start, candidate])
    params = Params()
    params.rl.retention_tolerance, params.rl.retention_slack, params.rl.mastered_accuracy = tolerance, slack, mastered
    sel = rl.CheckpointSelector(torch.nn.Linear(2, 1), None, rl.Validation(lambda m, tok: next(seq), tuple(forms)), params.rl)
    sel.check(0)
    sel.check(10)
    return sel


def test_progress_selection_keeps_training_unless_the_moving_levels_or_retention_fall():
    """``progress``: 100 validation questions, the first 50 of a form the start masters (0.98:
    retention), the rest of one it does not (0.20: being moved). A +1 on the moving questions is
    kept (no significance needed: continued training); a moving drop is refused; a moving gain
    that costs 2 points on the mastered form is refused at a 1-point tolerance, kept at 2 points."""
    forms = ["1+1"] * 50 + ["4+3"] * 50
    start = [1] * 49 + [0] + [1] * 10 + [0] * 40
    small_gain = [1] * 49 + [0] + [1] * 11 + [0] * 39
    kept = _select(start, small_gain, forms)
    assert kept.best_step == 10 and kept.curve[0]["mastered_forms"] == ["1+1"]
    assert kept.curve[1]["moving_accuracy"] == 0.22 and kept.curve[1]["retention_accuracy"] == 0.98
    assert _select(start, [1] * 49 + [0] + [1] * 9 + [0] * 41, forms).best_step == 0      # moving 0.20 -> 0.18
    costly = [1] * 48 + [0] * 2 + [1] * 30 + [0] * 20                                    # moving 0.60, 1+1 0.98 -> 0.96
    assert _select(start, costly, forms).best_step == 0 and _select(start, costly, forms, tolerance=0.02).best_step == 10
    refused = _select(start, costly, forms)
    assert refused.curve[1]["form_accuracy"] == {"1+1": 0.96, "4+3": 0.6}
    assert rl.slipped_forms(refused.curve, 0.01) == {"1+1": [0.98, 0.96]} and rl.slipped_forms(refused.curve, 0.02) == {}
    flags = rl.retention_flags(start, forms, Params().rl.mastered_accuracy)
    assert rl.progress_kept(start, small_gain, flags, 0.01) and not rl.progress_kept(start, costly, flags, 0.01)
    # without forms every question counts as moving and the guard is off
    assert rl.progress_kept([0, 1], [1, 1], rl.retention_flags([0, 1], (), 0.9), 0.01)
    assert not rl.progress_kept([1, 1], [0, 1], rl.retention_flags([1, 1], (), 0.9), 0.01)


def test_retention_is_guarded_per_mastered_form_not_per_split():
    """The case measured on SmolLM2-135M-Instruct: the seed split holds 1+1 (mastered, 0.98) and 2+1
    (0.48). Training took 2+1 to 0.80 and 1+1 to 0.56, so the split as a whole rose (here 0.60 ->
    0.80) while the one mastered form collapsed. The guard per form refuses it; a form at 0.85 is
    being moved, not guarded."""
    forms = ["1+1"] * 25 + ["2+1"] * 50 + ["2+2"] * 25
    start = [1] * 25 + [1] * 20 + [0] * 30 + [1] * 5 + [0] * 20      # 1+1 1.00, 2+1 0.40, 2+2 0.20
    after = [1] * 15 + [0] * 10 + [1] * 45 + [0] * 5 + [1] * 8 + [0] * 17   # 1+1 0.60, 2+1 0.90, 2+2 0.32
    seed_split = [f in ("1+1", "2+1") for f in forms]
    assert rl.split_accuracy(after, seed_split)[1] > rl.split_accuracy(start, seed_split)[1]   # the split rose
    assert rl.retention_flags(start, forms, 0.9) == [True] * 25 + [False] * 75
    assert not rl.progress_kept(start, after, rl.retention_flags(start, forms, 0.9), Params().rl.retention_tolerance)
    assert _select(start, after, forms).best_step == 0
    # a form just below the threshold is moved; a question without a form is never guarded
    assert rl.retention_flags([1] * 17 + [0] * 3, ["2+1"] * 20, 0.9) == [False] * 20
    assert rl.retention_flags([1, 1], [None, None], 0.9) == [False, False]
    assert rl.retention_flags([1, 1], ["1+1"], 0.9) == [False, False]          # forms of another length: no guard


def test_retention_slack_allows_a_few_questions_of_a_small_mastered_set_and_nothing_more():
    """SmolLM2's seed-0 c1, as measured: 16 validation 1+1 sums (start 14 right), 2+1 moved
    0.56 -> 0.79; the trained model got 12 of the 1+1 sums. At ``retention_tolerance`` 0.04 (less
    than one question of 16) it is refused; ``retention_slack`` 2 keeps it, and still refuses a third
    lost sum. On 500 mastered questions a slack of 2 is less than the 1-point tolerance, which rules
    alone (5 questions), so the embedded default's guard is unchanged by it."""
    forms = ["1+1"] * 16 + ["2+1"] * 48
    start = [1] * 14 + [0] * 2 + [1] * 27 + [0] * 21                   # 1+1 0.875, 2+1 0.5625
    two_lost = [1] * 12 + [0] * 4 + [1] * 38 + [0] * 10                # 1+1 0.75, 2+1 0.79
    three_lost = [1] * 11 + [0] * 5 + [1] * 38 + [0] * 10
    assert _select(start, two_lost, forms, tolerance=0.04, mastered=0.85).best_step == 0
    assert _select(start, two_lost, forms, tolerance=0.04, slack=2, mastered=0.85).best_step == 10
    assert _select(start, three_lost, forms, tolerance=0.04, slack=2, mastered=0.85).best_step == 0
    flags = rl.retention_flags(start, forms, 0.85)
    assert rl.progress_kept(start, two_lost, flags, 0.04, 2) and not rl.progress_kept(start, three_lost, flags, 0.04, 2)
    assert rl.slipped_forms(_select(start, three_lost, forms, tolerance=0.04, slack=2, mastered=0.85).curve, 2 / 16) == {"1+1": [0.875, 0.6875]}
    assert rl.retention_allowance(0.01, 2, 500) == 0.01 and rl.retention_allowance(0.04, 2, 16) == 0.125
    assert rl.retention_allowance(0.01, 2, 0) == 0.01
    big = ["1+1"] * 500 + ["4+3"] * 500
    start_big = [1] * 490 + [0] * 10 + [1] * 200 + [0] * 300          # 1+1 0.98
    lost_6 = [1] * 484 + [0] * 16 + [1] * 300 + [0] * 200             # 1+1 0.968: > 1 point, > 2 questions
    lost_5 = [1] * 485 + [0] * 15 + [1] * 300 + [0] * 200             # 1+1 0.97: exactly 1 point
    assert _select(start_big, lost_6, big, slack=2).best_step == 0 and _select(start_big, lost_5, big, slack=2).best_step == 10


def test_length_sorted_micro_batches_give_the_padded_batch_gradient_on_fewer_positions(tiny_model_dir):
    """``training.loop.sft_backward``: 12 rows of very different lengths in micro-batches of 4; the
    loss and every parameter's gradient equal those of :func:`sft_loss` on the one padded batch
    (float32), and the micro-batches together hold fewer padded positions than that batch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.training import loop

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [Rollout(id=f"r{i}", role="solver", group="g", question_id="q", prompt=f"Compute {i} + {'9' * (1 + 3 * i)}.",
                    completion="<think>" + "1 + 2 = 3 " * (i % 5) + f"</think><answer>{i}</answer>", reward=1.0) for i in range(12)]
    grads = {}
    for way in ("padded", "micro"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        model.zero_grad()
        if way == "padded":
            loss = loop.sft_loss(model, tok, rows, 512)
            loss.backward()
            loss = float(loss.detach())
        else:
            loss = loop.sft_backward(model, tok, rows, 512, micro_batch_rows=4)
        grads[way] = (loss, {n: p.grad.clone() for n, p in model.named_parameters()})
    assert grads["micro"][0] == pytest.approx(grads["padded"][0], rel=1e-5)
    for name, g in grads["padded"][1].items():
        assert torch.allclose(grads["micro"][1][name], g, atol=1e-6, rtol=1e-4), name
    encoded = sorted(batches.encode_rows(tok, rows, 512), key=lambda e: len(e[0]))
    longest = len(encoded[-1][0])
    micro_positions = sum(max(len(ids) for ids, _ in encoded[i:i + 4]) * 4 for i in range(0, 12, 4))
    assert micro_positions < 0.8 * longest * 12


def test_shared_prompt_prefix_runs_once_with_the_plain_gradient(tiny_model_dir):
    """``training.loop.micro_batches`` / ``completion_nll``: a batch mixing roles whose prompts share a
    long instruction within each role (as SmolLM2's chat template and role prompts do) is cut per
    role; each role's prefix runs once at batch 1 and the rest of each row on its repeated key/value
    cache. The loss and every parameter's gradient equal the plain padded batch's (float32), with far
    fewer positions run. Rows sharing less than ``SHARED_PREFIX_MIN_TOKENS`` (the embedded model's,
    two labels of one question among them) keep the plain length-sorted cut."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.training import loop

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    solve = "Solve the problem step by step, think inside think tags and answer inside answer tags. " * 3
    plan = "Write a short numbered plan for the problem inside plan tags and do not solve it. " * 3

    def row(i, prompt, completion):
        return Rollout(id=f"r{i}", role="solver", group="g", question_id="q", prompt=prompt, completion=completion, reward=1.0)

    rows = ([row(i, solve + f"Compute {i} + {'7' * (1 + i)}.", "<think>" + "1 + 2 = 3 " * (i % 3) + f"</think><answer>{i}</answer>")
             for i in range(10)] + [row(10 + i, plan + f"Compute {i} + 5.", "<plan>1. add</plan>") for i in range(3)]
            + [row(20, "Rate it.", "<score>7</score>"), row(21, "Write a problem.", "<question>Compute 1 + 2.</question>")])
    encoded = batches.encode_rows(tok, rows, 1024)
    parts = loop.micro_batches(tok, encoded)
    assert sorted(ids.shape[0] for ids, *_ in parts) == [2, 3, 10]
    assert sorted(p >= loop.SHARED_PREFIX_MIN_TOKENS for ids, *_, p in parts if ids.shape[0] > 2) == [True, True]
    grads, positions = {}, {}
    for way in ("padded", "shared"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        model.zero_grad()
        seen = []
        model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["input_ids"].numel()), with_kwargs=True)
        if way == "padded":
            loss = loop.sft_loss(model, tok, rows, 1024)
            loss.backward()
            loss = float(loss.detach())
        else:
            loss = loop.sft_backward(model, tok, rows, 1024)
        grads[way], positions[way] = (loss, {n: p.grad.clone() for n, p in model.named_parameters()}), sum(seen)
    assert grads["shared"][0] == pytest.approx(grads["padded"][0], rel=1e-5)
    for name, g in grads["padded"][1].items():
        assert torch.allclose(grads["shared"][1][name], g, atol=1e-6, rtol=1e-4), name
    assert positions["shared"] < 0.5 * positions["padded"]
    # short instructions, and two labels of one question, keep the plain cut (and the plain numerics)
    short = [row(i, f"Compute {i} + {7 * i}. " + "Solve it. " * 12, f"<answer>{8 * i}</answer>") for i in range(31)]
    short.append(row(40, short[3].prompt, "<answer>24</answer>"))
    enc = batches.encode_rows(tok, short, 1024)
    assert any(len(g) == 2 for g in [[e for e in enc if e[0][:40] == f[0][:40]] for f in enc])
    cut = [(ids.tolist(), p) for ids, _, _, p in loop.micro_batches(tok, enc)]
    plain = sorted(enc, key=lambda e: len(e[0]))
    assert [len(ids) for ids, _ in cut] == [16, 16] and all(p < loop.SHARED_PREFIX_MIN_TOKENS for _, p in cut)
    flat = [r for ids, _ in cut for r in ids]
    assert len(flat) == len(plain) and all(r[:len(e[0])] == e[0] for r, e in zip(flat, plain))


def test_the_sft_gate_guards_the_mastered_seed_forms_and_weighs_earlier_cycles_forms_with_the_rest():
    """``stages.train.sft_retention_flags``: only the seed forms the starting model masters guard
    retention in the SFT step's check; a form an earlier cycle mastered (4+5) counts with the rungs
    being moved. Seed 0's c3, in small: a step that costs 4+5 and gains more on 6+6 is kept (the
    mastered-forms guard refused it, and it was the better model held-out); one that costs a seed
    form is refused; one whose losses outweigh its gains is refused; questions without a split keep
    the per-form guard."""
    from selfevolve.records import MathSpec, Question
    from selfevolve.stages.train import sft_retention_flags

    def qs(form, split, n):
        return [Question(id=f"{form}-{i}", domain="math", text="t", spec=MathSpec(answer="1"), form=form, split=split)
                for i in range(n)]

    questions = qs("3+3", "seed", 100) + qs("4+5", "beyond", 20) + qs("6+6", "beyond", 20)
    start = [1] * 100 + [1] * 20 + [0] * 20
    flags = sft_retention_flags(start, questions, 0.9)
    assert flags == [True] * 100 + [False] * 40
    assert rl.retention_flags(start, [q.form for q in questions], 0.9) == [True] * 120 + [False] * 20   # what the RL guard sees
    trade = [1] * 100 + [1] * 17 + [0] * 3 + [1] * 8 + [0] * 12          # 4+5 -3, 6+6 +8
    assert rl.progress_kept(start, trade, flags, 0.01)
    assert not rl.progress_kept(start, trade, rl.retention_flags(start, [q.form for q in questions], 0.9), 0.01)
    assert not rl.progress_kept(start, [1] * 97 + [0] * 3 + trade[100:], flags, 0.01)      # a seed form pays: refused
    assert not rl.progress_kept(start, [1] * 100 + [1] * 10 + [0] * 10 + [1] * 8 + [0] * 12, flags, 0.01)  # -10 +8
    unsplit = [q.model_copy(update={"split": None}) for q in questions]
    assert sft_retention_flags(start, unsplit, 0.9) == [True] * 120 + [False] * 20
