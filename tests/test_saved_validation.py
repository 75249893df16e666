"""A validation outcome saved beside the weights (``selfevolve.training.saved_validation``): read
back only for the same weights and questions, and what the stages skip because of it."""

from __future__ import annotations

import json
import shutil

from selfevolve.training import rl
from selfevolve.training.saved_validation import VALIDATION_FILE, save_validation, saved_validation


def _perturbed(model_dir, out_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out_dir)


def test_a_saved_outcome_is_read_back_only_for_the_same_weights_and_key(tiny_model_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    save_validation(d, "k", [1, 0, 1])
    assert saved_validation(d, "k") == [1, 0, 1]
    assert saved_validation(d, "other questions") is None
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)  # a copied folder (a refused step's RL checkpoint) carries it
    assert saved_validation(copy, "k") == [1, 0, 1]
    _perturbed(d, d)  # retrained into the same folder: the stale file stays, the weights changed
    assert (d / VALIDATION_FILE).exists() and saved_validation(d, "k") is None
    (copy / VALIDATION_FILE).write_text("{not json")
    assert saved_validation(copy, "k") is None
    (copy / VALIDATION_FILE).write_text(json.dumps({"key": "k", "weights": "x", "outcome": [1]}))
    assert saved_validation(copy, "k") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    save_validation(empty, "k", [1])
    assert not (empty / VALIDATION_FILE).exists() and saved_validation(empty, "k") is None
    assert saved_validation("HuggingFaceTB/SmolLM2-135M-Instruct", "k") is None


def test_the_selector_takes_a_known_start_and_saves_the_kept_outcome_beside_the_weights(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.config import Params

    model, tok = AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)
    params = Params()
    calls = []

    def run(m, t):
        calls.append(1)
        return [1, 1, 1, 0]

    forms = ("4+3",) * 4
    sel = rl.CheckpointSelector(model, tok, rl.Validation(run, forms, key="k", known_start=(1, 0, 0, 0)), params.rl)
    assert sel.check(0)["accuracy"] == 0.25 and not calls  # step 0 read, not answered
    assert sel.check(10)["accuracy"] == 0.75 and calls == [1] and sel.best_step == 10
    sel.save_best(model, tok, tmp_path / "kept")
    assert saved_validation(tmp_path / "kept", "k") == [1, 1, 1, 0]
    plain = rl.CheckpointSelector(model, tok, rl.Validation(run, forms), params.rl)  # no key: nothing saved
    plain.check(0)
    assert len(calls) == 2
    plain.save_best(model, tok, tmp_path / "plain")
    assert not (tmp_path / "plain" / VALIDATION_FILE).exists()


def test_train_sft_reads_the_rl_checkpoints_outcome_and_the_next_cycle_reads_its_own(tiny_model_dir, tmp_path, monkeypatch):
    """``train_sft``'s "before" is the checkpoint ``train_rl`` kept and validated: it is read, not
    answered again; its "after" is saved with ``models/c1``, where c2's ``train_rl`` starts. Without
    the file (or with other weights) both are answered."""
    from selfevolve.config import CycleSpec, Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import Rollout, write_jsonl
    from selfevolve.stages import train as stage
    from selfevolve.stages.base import seeds
    from selfevolve.stages.context import StageContext
    from selfevolve.training import sft as sft_module

    params = Params()
    params.cycles = {"c1": CycleSpec(init="base"), "c2": CycleSpec(init="c1")}
    params.model.train_precision = "float32"
    params.rl.eval_questions = 20
    seeds(StageContext(params, "base", tmp_path))
    base, P = cycle_paths("base", tmp_path), cycle_paths("c1", tmp_path)
    write_jsonl(base.replay, [Rollout(id=f"w{i}", role="solver", group=f"q{i}", question_id=f"q{i}", prompt=f"Compute {i} + 0.",
                                      completion=f"<answer>{i}</answer>", reward=1.0) for i in range(4)])
    P.mass_dir.mkdir(parents=True)
    for path in (P.earlier_labels, P.self_labels, P.earlier_distilled):
        write_jsonl(path, [])
    P.sft_dataset.write_text(json.dumps({"messages": [{"role": "user", "content": "Compute 1 + 1."},
                                                      {"role": "assistant", "content": "<answer>2</answer>"}]}) + "\n")
    shutil.copytree(tiny_model_dir, P.rl_model)
    ctx = StageContext(params, "c1", tmp_path)
    n = len(stage.validation_questions(ctx))
    key = stage.validator(ctx, "train_rl").key
    rl_outcome = [1] * (n // 2) + [0] * (n - n // 2)
    save_validation(P.rl_model, key, rl_outcome)
    answered = []
    monkeypatch.setattr(stage, "correctness", lambda backend, qs, config, seed=0: answered.append(backend.model_path) or [1] * len(qs))
    real = sft_module.train_sft
    monkeypatch.setattr(sft_module, "train_sft", lambda *a, **k: real(*a[:3], a[3].model_copy(update={"steps": 2}), *a[4:], **k))

    metrics = stage.train_sft(ctx)
    assert metrics["sft_trained"] == 1 and metrics["sft_val_before_reused"] == 1
    assert answered == [str(P.model)]  # only the trained model was answered
    assert metrics["sft_val_accuracy_before"] == sum(rl_outcome) / n and metrics["sft_val_accuracy_after"] == 1.0
    assert stage.validator(StageContext(params, "c2", tmp_path), "train_rl").known_start == (1,) * n

    _perturbed(tiny_model_dir, P.rl_model)  # other weights than those validated: answered again
    shutil.rmtree(P.model)
    answered.clear()
    metrics = stage.train_sft(ctx)
    assert metrics["sft_val_before_reused"] == 0 and answered == [str(P.rl_model), str(P.model)]

    # a refused step: models/c1 is the RL checkpoint again, and it carries that checkpoint's outcome
    monkeypatch.setattr(stage, "correctness", lambda backend, qs, config, seed=0: [int(backend.model_path == str(P.rl_model))] * len(qs))
    shutil.rmtree(P.model)
    metrics = stage.train_sft(ctx)
    assert metrics["sft_kept"] == 0 and metrics["sft_val_accuracy_before"] == 1.0 and metrics["sft_val_accuracy_after"] == 0.0
    assert stage.validator(StageContext(params, "c2", tmp_path), "train_rl").known_start == (1,) * n
