"""Expert iteration: which completions become self-labels, how a batch is composed, and that a run
on verified labels teaches the model the labelled answers while replay keeps what it knew."""

from __future__ import annotations

import pytest

from selfevolve.config import Params
from selfevolve.training.config import TrainConfig
from selfevolve.records import Attempt, MathSpec, Question, Rollout, Verdict
from selfevolve.stages.train import retention_labels, self_labels
from selfevolve.training.expert_iteration import batch_plan, train_expert_iteration, training_steps

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _q(i: int) -> Question:
    return Question(id=f"q{i}", domain="math", text=f"Compute {i} + 1.", spec=MathSpec(answer=str(i + 1)), level=1)


def _tries(q: Question, outcomes: list[int], same_text: bool = False, forms: list[str] | None = None):
    """Attempts at ``q`` (correct where ``outcomes`` says 1), each ``<think>work</think><answer>N</answer>``
    or ``forms[j]`` with ``{answer}`` filled in."""
    attempts, verdicts = [], {}
    for j, ok in enumerate(outcomes):
        answer = q.spec.answer if ok else "0"
        text = (forms[j] if forms else "<think>work</think><answer>{answer}</answer>").format(answer=answer)
        a = Attempt(id=f"{q.id}-s{j}", question_id=q.id, sample=j, prompt=f"P {q.text}",
                    completion=text + ("" if same_text else " " * j))
        attempts.append(a)
        verdicts[a.id] = Verdict(attempt_id=a.id, question_id=q.id, correct=float(ok), status="correct" if ok else "wrong")
    return attempts, verdicts


def test_self_labels_keep_verified_completions_of_questions_in_the_band():
    qs = [_q(i) for i in range(4)]
    attempts, verdicts = [], {}
    for q, outcomes in zip(qs, ([1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0])):
        a, v = _tries(q, outcomes)
        attempts += a
        verdicts |= v
    rows, counts = self_labels(qs, attempts, verdicts, (0.05, 0.8), per_question=2, cycle="c1")
    # q0 always solved (1.0 > 0.8) and q1 never (no label): out; q2 at 0.25 gives its one success,
    # q3 at 0.75 gives two of its three (per_question = 2)
    assert counts == {"questions_in_band": 2, "questions_in_band_by_form": 0, "self_labels": 3, "self_labels_malformed": 0}
    assert [r.question_id for r in rows] == ["q2", "q3", "q3"]
    assert all(r.role == "solver" and f"<answer>{int(r.question_id[1:]) + 1}</answer>" in r.completion for r in rows)


def test_a_form_the_solver_is_learning_is_labelled_from_every_question_it_got_right():
    """A question solved every time is out of the band, unless its form's pass rate over the cycle
    is in it: then the form is a rung being learned and all its right answers are labels. A form
    the Solver has mastered (rate above the band) or never solves stays out."""
    def q(i, form):
        return _q(i).model_copy(update={"form": form})

    plan = {"4+3": ([1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]),     # form rate 0.5: in
            "2+2": ([1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]),     # 0.94: mastered
            "3+4": ([0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0])}     # 0.0: nothing to learn
    qs, attempts, verdicts = [], [], {}
    for form, outcomes in plan.items():
        for outcome in outcomes:
            qs.append(q(len(qs), form))
            a, v = _tries(qs[-1], outcome)
            attempts += a
            verdicts |= v
    rows, counts = self_labels(qs, attempts, verdicts, (0.05, 0.8), per_question=2, cycle="c1")
    assert sorted({r.question_id for r in rows}) == ["q0", "q1", "q7"]   # both 4+3 questions, and 2+2's q7 by its own rate
    assert counts == {"questions_in_band": 5, "questions_in_band_by_form": 4, "self_labels": 6, "self_labels_malformed": 0}
    # without forms, the per-question band alone decides
    bare = [x.model_copy(update={"form": None}) for x in qs]
    assert {r.question_id for r in self_labels(bare, attempts, verdicts, (0.05, 0.8), 2, "c1")[0]} == {"q7"}


def test_retention_labels_teach_again_the_forms_the_cycles_taught_once_mastered():
    """``rl.retention_labels``: a question solved in every sample, in a form earlier cycles taught
    and the Solver now answers above the band, gives one well-formed verified completion (source
    ``retain``); a form the cycles never taught (the warm start's), a form still in the band, a
    question missed once, and a question already labelled give none."""
    def q(i, form):
        return _q(i).model_copy(update={"form": form})

    plan = {"4+3": ([1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]),     # taught, 0.94: q0, q1, q2 (q3 missed once)
            "1+1": ([1, 1, 1, 1], [1, 1, 1, 1]),                                # never taught: the warm start's
            "5+3": ([1, 1, 1, 1], [0, 0, 0, 0])}                                # taught, 0.5: in the band, self_labels' job
    qs, attempts, verdicts = [], [], {}
    for form, outcomes in plan.items():
        for outcome in outcomes:
            qs.append(q(len(qs), form))
            a, v = _tries(qs[-1], outcome, forms=["<answer>{answer}</answer>"] + ["<think>work</think><answer>{answer}</answer>"] * 3)
            attempts += a
            verdicts |= v
    rows = retention_labels(qs, attempts, verdicts, {"4+3", "5+3"}, (0.05, 0.8), labelled={"q2"}, cycle="c3")
    assert [r.question_id for r in rows] == ["q0", "q1"]
    assert all(r.detail["source"] == "retain" and r.detail["form"] == "4+3" and r.completion.startswith("<think>") for r in rows)
    assert retention_labels(qs, attempts, verdicts, set(), (0.05, 0.8), set(), "c3") == []


def test_self_labels_are_verified_answers_in_the_solvers_format():
    """A right answer reached through stray tags, without the think block or with text around the
    blocks is not a label (what SmolLM2's labels taught: bare answers on sums it had mastered);
    the next well-formed right completion of the question takes its place."""
    q = _q(3)
    forms = ["<answer>{answer}</answer>", "<remember>3 + 1</remember><answer>{answer}</answer>",
             "Yes.\n<think>3 + 1 = 4</think><answer>{answer}</answer>", "<think>3 + 1 = 4</think>\n<answer>{answer}</answer>",
             "<think>3 + 1 = 4</think><answer>{answer}</answer>"]
    attempts, verdicts = _tries(q, [1, 1, 1, 1, 0], forms=forms)
    rows, counts = self_labels([q], attempts, verdicts, (0.0, 1.0), per_question=2, cycle="c1")
    assert [r.completion.strip() for r in rows] == ["<think>3 + 1 = 4</think>\n<answer>4</answer>"]
    assert counts["self_labels_malformed"] == 3


def test_each_cycle_carries_every_earlier_cycles_self_labels_and_no_other_rows(tmp_path):
    """``datasets`` writes a cycle's earlier labels as its start's earlier labels plus its start's
    self-labels (c2 trains again on what c1 and c0 labelled), and nothing else (not the start's
    retention labels, which each cycle draws afresh from its own solve set): the warm start's
    transcripts stay in the base cycle's replay, which ``train_rl`` reads directly."""
    from selfevolve.paths import cycle_paths
    from selfevolve.records import read_jsonl, write_jsonl
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import datasets

    params = Params()
    params.mass.enabled = False
    label = lambda i, c: Rollout(id=f"l{i}", role="solver", group=f"g{i}", question_id=f"q{i}", prompt="P", completion="C", reward=1.0,
                                 detail={"source": "self_label", "cycle": c})
    base = cycle_paths("base", tmp_path)
    base.dir.mkdir(parents=True)
    write_jsonl(base.replay, [Rollout(id="t0", role="solver", group="t", question_id="t", prompt="P", completion="C", reward=1.0)])
    write_jsonl(base.earlier_labels, [label(0, "c0")])
    write_jsonl(base.self_labels, [label(1, "base")])
    retain = Rollout(id="r9", role="solver", group="g9", question_id="q9", prompt="P", completion="C", reward=1.0,
                     detail={"source": "retain", "cycle": "c1"})   # a cycle's retention labels are its own: not carried on
    for c, init_labels in (("c1", None), ("c2", [label(2, "c1"), retain])):
        P = cycle_paths(c, tmp_path)
        P.dir.mkdir(parents=True)
        for f in (P.rollouts, P.pool, P.solve_set, P.attempts, P.verdicts):
            write_jsonl(f, [])
        if init_labels:
            write_jsonl(cycle_paths("c1", tmp_path).self_labels, init_labels)
        metrics = datasets(StageContext(params, c, tmp_path))
    assert [r.id for r in read_jsonl(cycle_paths("c1", tmp_path).earlier_labels, Rollout)] == ["l0", "l1"]
    assert [r.id for r in read_jsonl(cycle_paths("c2", tmp_path).earlier_labels, Rollout)] == ["l0", "l1", "l2"]
    assert metrics["earlier_labels"] == 3


def test_self_labels_do_not_repeat_a_completion():
    q = _q(7)
    attempts, verdicts = _tries(q, [1, 1, 0, 0], same_text=True)
    rows, _ = self_labels([q], attempts, verdicts, (0.0, 1.0), per_question=2, cycle="c1")
    assert len(rows) == 1


def test_batch_plan_shares_and_fallbacks():
    assert batch_plan(64, True, True, True, 0.5, 0.1) == (26, 32, 6)
    assert batch_plan(64, False, True, True, 0.5, 0.1) == (0, 58, 6)  # no labels: their share is replayed
    assert batch_plan(64, True, False, False, 0.5, 0.1) == (64, 0, 0)
    assert batch_plan(10, False, False, True, 0.5, 0.1) == (0, 0, 10)
    with pytest.raises(ValueError, match="nothing to train on"):
        batch_plan(8, False, False, False, 0.5, 0.1)


def test_label_epochs_lengthen_a_run_whose_labels_grew(tiny_model_dir, tmp_path):
    """``rl.label_epochs``: the run takes enough steps to pass over every self-label that many times
    at the batch's label rows, never fewer than ``rl.steps``; 0 leaves ``rl.steps`` as given."""
    assert training_steps(40, 0.0, 239, 14) == 40
    assert training_steps(40, 6.0, 74, 14) == 40                 # 32 needed: rl.steps stands
    assert training_steps(40, 6.0, 239, 14) == 103               # ceil(6 * 239 / 14)
    assert training_steps(40, 6.0, 0, 0) == 40
    labels = [_row(i, f"Compute {i} + {i}.", f"<answer>{2 * i}</answer>") for i in range(9)]
    params = Params()
    params.rl.steps, params.rl.batch_size, params.rl.label_epochs, params.rl.warmup_steps, params.rl.decay_steps = 2, 4, 2.0, 1, 1
    params.model.train_precision = "float32"
    summary = train_expert_iteration(tiny_model_dir, labels, [], [], lambda m, t: [1], TrainConfig.from_params(params), tmp_path / "out")
    assert summary["steps"] == len(summary["loss_curve"]) == 5    # ceil(2 * 9 / 4)


def _row(i: int, prompt: str, completion: str) -> Rollout:
    return Rollout(id=f"r{i}", role="solver", group=f"g{i}", question_id="q", prompt=prompt, completion=completion, reward=1.0)


def test_training_on_self_labels_teaches_them_and_replay_keeps_the_rest(tiny_model_dir, tmp_path):
    """A run on verified labels lowers their loss a lot; with replay the replayed rows' loss falls too
    (without it, they would be forgotten or untouched); the saved model loads; validation gates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.training.loop import sft_loss

    labels = [_row(i, f"Compute {i} + {i}.", f"<answer>{2 * i}</answer>") for i in range(4)]
    replay = [_row(100 + i, f"Compute {i} - {i}.", "<answer>0</answer>") for i in range(4)]
    params = Params()
    params.rl.steps, params.rl.batch_size, params.rl.learning_rate = 30, 8, 3e-3
    params.rl.warmup_steps, params.rl.decay_steps, params.rl.select_p = 3, 6, 1.0
    params.model.train_precision = "float32"
    checks = iter([[0] * 10, [1] * 10])  # validation: the trained model is better -> kept

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        l0, r0 = sft_loss(before, tok, labels, 256).item(), sft_loss(before, tok, replay, 256).item()
    summary = train_expert_iteration(tiny_model_dir, labels, replay, [], lambda m, t: next(checks), TrainConfig.from_params(params), tmp_path / "out")
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    with torch.no_grad():
        l1, r1 = sft_loss(after, tok, labels, 256).item(), sft_loss(after, tok, replay, 256).item()
    assert summary["trained"] and summary["best_step"] == 30 and summary["batch_labels"] == 4 and summary["batch_replay"] == 4
    assert l1 < 0.5 * l0 and r1 < r0
    assert summary["loss_curve"][-1]["lr"] < 0.05 * params.rl.learning_rate  # the run ended in a decay


def test_a_run_that_does_not_validate_better_keeps_the_start(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    labels = [_row(i, f"Compute {i} + {i}.", f"<answer>{2 * i}</answer>") for i in range(4)]
    params = Params()
    params.rl.steps, params.rl.batch_size, params.rl.learning_rate = 5, 4, 3e-3
    params.model.train_precision = "float32"
    checks = iter([[1] * 10, [0] * 10, [0] * 10])  # the start, the run, its retry at half the rate
    summary = train_expert_iteration(tiny_model_dir, labels, [], [], lambda m, t: next(checks), TrainConfig.from_params(params), tmp_path / "out")
    assert summary["best_step"] == 0 and summary["attempts"] == 2 and summary["kept_learning_rate"] == 0.0
    assert [c.get("learning_rate") for c in summary["val_curve"]] == [None, 3e-3, 1.5e-3]
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    kept = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    assert all(torch.equal(start[k], kept[k]) for k in start)


def test_a_refused_run_is_trained_again_from_the_start_at_a_smaller_rate(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    labels = [_row(i, f"Compute {i} + {i}.", f"<answer>{2 * i}</answer>") for i in range(4)]
    params = Params()
    params.rl.steps, params.rl.batch_size, params.rl.learning_rate, params.rl.retry_rate = 5, 4, 3e-3, 0.5
    params.model.train_precision = "float32"
    checks = iter([[1] * 5 + [0] * 5, [0] * 10, [1] * 10])  # the start; the run refused; its retry better
    logged = []
    summary = train_expert_iteration(tiny_model_dir, labels, [], [], lambda m, t: next(checks), TrainConfig.from_params(params),
                                     tmp_path / "retried", on_step=lambda step, metrics: logged.append((step, *metrics)))
    assert summary["best_step"] == 5 and summary["attempts"] == 2 and summary["kept_learning_rate"] == 1.5e-3
    # each attempt's curve under its own keys, so the two do not overlap in MLflow's step chart
    first, retry = logged[:len(logged) // 2], logged[len(logged) // 2:]
    assert [s for s, *_ in first] == [s for s, *_ in retry] and first[-1][1:] == ("val_accuracy", "val_p_vs_start")
    assert all(k.startswith("retry_") for _, *keys in retry for k in keys)
    assert not any(k.startswith("retry_") for _, *keys in first for k in keys)
    # the retry is the run a rate of 1.5e-3 makes from the start: the same batches, not the refused weights
    params.rl.learning_rate, params.rl.retry_rate = 1.5e-3, 0.0
    checks = iter([[1] * 5 + [0] * 5, [1] * 10])
    once = train_expert_iteration(tiny_model_dir, labels, [], [], lambda m, t: next(checks), TrainConfig.from_params(params),
                                  tmp_path / "once")
    assert once["attempts"] == 1 and once["kept_learning_rate"] == 1.5e-3
    retried = AutoModelForCausalLM.from_pretrained(tmp_path / "retried").state_dict()
    direct = AutoModelForCausalLM.from_pretrained(tmp_path / "once").state_dict()
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert all(torch.equal(retried[k], direct[k]) for k in start)
    assert not all(torch.equal(start[k], retried[k]) for k in start)


def test_nothing_to_learn_saves_the_model_unchanged(tiny_model_dir, tmp_path):
    summary = train_expert_iteration(tiny_model_dir, [], [_row(0, "a", "b")], [], lambda m, t: [1], TrainConfig.from_params(Params()), tmp_path / "out")
    assert summary["trained"] is False and "no verified self-labels" in summary["reason"]
    assert (tmp_path / "out" / "config.json").is_file()


def test_other_roles_learn_their_better_rollouts_without_costing_the_solver(tiny_model_dir, tmp_path):
    """The Challenger's rollouts that scored above its mean are imitated, those below are not; and
    training them beside the Solver leaves the Solver's loss on unseen questions of its kind within
    10 % of a run without them (the roles share one backbone)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.training.loop import sft_loss

    labels = [_row(i, f"Compute {i} + {i}.", f"<answer>{2 * i}</answer>") for i in range(6)]
    unseen = [_row(50 + i, f"Compute {i} + {i + 1}.", f"<answer>{2 * i + 1}</answer>") for i in range(6)]
    prompt = "Write a new math problem like the reference, a little harder."
    good = [Rollout(id=f"g{i}", role="challenger", group=f"g{i}", question_id="q", prompt=prompt,
                    completion=f"<question>Compute {10 + i} + {20 + i}.</question>", reward=0.9, advantage=1.0) for i in range(4)]
    bad = [Rollout(id=f"b{i}", role="challenger", group=f"b{i}", question_id="q", prompt=prompt,
                   completion="<question>+ + ?</question>", reward=0.1, advantage=-1.0) for i in range(4)]
    params = Params()
    params.rl.steps, params.rl.batch_size, params.rl.learning_rate = 30, 8, 3e-3
    params.rl.warmup_steps, params.rl.decay_steps, params.rl.select_p = 3, 6, 1.0
    params.rl.replay_fraction, params.rl.other_roles_fraction = 0.0, 0.25
    params.model.train_precision = "float32"
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    losses = {}
    for name, others in (("solver_only", []), ("all_roles", good + bad)):
        checks = iter([[0] * 10, [1] * 10])
        summary = train_expert_iteration(tiny_model_dir, labels, [], others, lambda m, t: next(checks), TrainConfig.from_params(params), tmp_path / name)
        model = AutoModelForCausalLM.from_pretrained(tmp_path / name)
        with torch.no_grad():
            losses[name] = {k: sft_loss(model, tok, rows, 256).item() for k, rows in (("unseen", unseen), ("good", good), ("bad", bad))}
        assert summary["rows_other_roles"] == (4 if others else 0)
    assert losses["all_roles"]["good"] < 0.5 * losses["solver_only"]["good"] and losses["all_roles"]["good"] < losses["all_roles"]["bad"]
    assert losses["all_roles"]["unseen"] <= 1.1 * losses["solver_only"]["unseen"], losses


def test_auto_precision_trains_in_bfloat16_only_where_the_cpu_has_it(monkeypatch):
    """``train_precision: auto`` (the default) must not pick bfloat16 on a CPU that emulates it
    (an AVX2 CPU ran a warm-start step 12x slower in bfloat16 than in float32)."""
    import torch

    from selfevolve import runtime_env
    from selfevolve.training import loop

    x = torch.ones(4, 4)
    for native, expected in ((False, "float32"), (True, "bfloat16")):
        monkeypatch.setattr(runtime_env, "native_bfloat16", lambda native=native: native)
        assert loop.resolve_precision("auto") == expected
        with loop.autocast("auto"):
            assert (x @ x).dtype == getattr(torch, expected)
    monkeypatch.setattr(runtime_env, "native_bfloat16", lambda: False)
    assert loop.resolve_precision("bfloat16") == "bfloat16" and loop.resolve_precision("float32") == "float32"
    assert Params().model.train_precision == "auto"
    with pytest.raises(ValueError, match="train_precision"):
        loop.resolve_precision("float16")


def test_datasets_adds_retention_labels_to_the_self_labels_at_most_as_many_as_they(tmp_path):
    """``datasets`` with ``rl.retention_labels``: the forms earlier cycles' self-labels taught (read
    through the pool) give retention rows for the questions solved every time, capped at the cycle's
    own self-labels; off, none."""
    from selfevolve.paths import cycle_paths
    from selfevolve.records import read_jsonl, write_jsonl
    from selfevolve.stages.context import StageContext
    from selfevolve.stages.train import datasets

    def q(i, form):
        return _q(i).model_copy(update={"form": form})

    mastered = [q(i, "4+3") for i in range(6)]            # solved 4 of 4: retention candidates
    learning = [q(10 + i, "5+4") for i in range(2)]        # 3 of 4 and 1 of 4: the cycle's self-labels
    attempts, verdicts = [], []
    for question, outcome in [(x, [1, 1, 1, 1]) for x in mastered] + list(zip(learning, ([1, 1, 1, 0], [1, 0, 0, 0]))):
        a, v = _tries(question, outcome)
        attempts += a
        verdicts += list(v.values())
    base = cycle_paths("base", tmp_path)
    base.dir.mkdir(parents=True)
    write_jsonl(base.earlier_labels, [])
    write_jsonl(base.self_labels, [Rollout(id="l0", role="solver", group="q0", question_id="q0", prompt="P", completion="C",
                                           reward=1.0, detail={"source": "self_label", "cycle": "base"})])
    P = cycle_paths("c1", tmp_path)
    P.dir.mkdir(parents=True)
    write_jsonl(P.rollouts, [])
    write_jsonl(P.pool, mastered + learning)
    write_jsonl(P.solve_set, mastered + learning)
    write_jsonl(P.attempts, attempts)
    write_jsonl(P.verdicts, verdicts)
    params = Params()
    params.mass.enabled = False
    params.rl.retention_labels = True
    metrics = datasets(StageContext(params, "c1", tmp_path))
    rows = read_jsonl(P.self_labels, Rollout)
    labels = [r for r in rows if r.detail["source"] == "self_label"]
    retained = [r for r in rows if r.detail["source"] == "retain"]
    assert len(labels) == 3 and metrics["retention_labels"] == len(retained) == 3       # 6 candidates, capped at 3
    assert {r.detail["form"] for r in retained} == {"4+3"} and len({r.question_id for r in retained}) == 3
    params.rl.retention_labels = False
    assert datasets(StageContext(params, "c1", tmp_path))["retention_labels"] == 0
