"""Expert iteration for every role: each role imitates its own outputs that worked, with replay,
in one run on a warm-up / stable / decay schedule.

The Solver's signal is exact: a completion is kept only when the external verifier accepted its
answer, and only for questions whose pass rate over the n samples lies in the frontier band
(default 5-80 %): questions the Solver always solves teach nothing, questions it never solves have
no label. Training on these self-labels is expert iteration / rejection-sampling fine-tuning
(Anthony et al. 2017, "Thinking Fast and Slow with Deep Learning and Tree Search"; Zelikman et al.
2022, STaR; Yuan et al. 2023, RFT). The labels of earlier cycles stay in the labelled share, and
each batch also replays the warm start's role transcripts (``rl.replay_fraction``), so the levels
already learned and the roles' formats are kept; every run ends with a learning-rate decay. Both
are what made self-improvement work on small transformers in Lee et al. 2025 ("Self-Improving
Transformers Overcome Easy-to-Hard and Length Generalization Challenges", arXiv 2502.01612).

The Challenger, Planner and Critic keep training on their SAGE rewards the same way: a share of
each batch (``rl.other_roles_fraction``) imitates their rollouts that scored above their role's
mean (positive Task-Relative REINFORCE++ advantage, ``selfevolve.training.advantages``), a
filtered behaviour cloning of the policy's own better samples. Measured on the embedded model,
the clipped REINFORCE++ surrogate on the same rollouts at the Solver's learning rate moved the
shared backbone far (KL 1.8 from the behaviour policy after 100 steps) and cost the Solver 0.16 of
its frontier accuracy in the next cycle (0.05 at a tenth of the loss weight); imitation keeps every
update a step towards text the model itself wrote.

The loss is the NLL of the completion tokens of the whole batch (``selfevolve.training.loop.fit``:
fresh AdamW, ``rl.warmup_steps`` of linear warm-up, constant rate, cosine decay over the last
``rl.decay_steps`` to ``rl.min_lr_ratio``). Validation runs before and after
(``CheckpointSelector``, ``rl.selection``): by default the trained model is kept unless it is
lower on the questions being moved or lost on the forms the start already masters. A refused run
is trained once more from the start on the same batches at ``rl.retry_rate`` of the learning rate
(a trust region's rejected step, shrunk): measured on the float32 `make run`'s second cycle
(docs/measurements.md, "December 5 (late)"), 2e-4 cost 4+3 and 5+3 (0.90 -> 0.69, 0.76 -> 0.38 on
validation) while 1e-4 moved 4+4 0.57 -> 0.83 and kept every mastered form.
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path

from selfevolve.records import Rollout, write_model_summary
from selfevolve.training.loop import fit
from selfevolve.training.config import TrainConfig
from selfevolve.training.rl import CheckpointSelector, Validate, load_policy, save_policy, slipped_forms

log = logging.getLogger(__name__)


def batch_plan(batch_size: int, have_labels: bool, have_replay: bool, have_pg: bool, replay_fraction: float,
               other_roles_fraction: float) -> tuple[int, int, int]:
    """(self-labels, replay, other roles' rows) per batch of ``batch_size``: the fractions rounded,
    the remainder to the self-labels; a missing source's share goes to the self-labels, else to
    replay. Raises ``ValueError`` when there is nothing to train on."""
    n_pg = round(batch_size * other_roles_fraction) if have_pg else 0
    n_replay = round(batch_size * replay_fraction) if have_replay else 0
    n_labels = batch_size - n_pg - n_replay
    if not have_labels:
        if not have_replay:
            if not have_pg:
                raise ValueError("nothing to train on: no self-labels, no replay rows, no rollouts of other roles")
            return 0, 0, batch_size
        n_replay, n_labels = n_replay + n_labels, 0
    return n_labels, n_replay, n_pg




def training_steps(steps: int, label_epochs: float, n_labels: int, labels_per_batch: int) -> int:
    """``rl.steps``, or more when ``rl.label_epochs`` passes over the ``n_labels`` self-labels at
    ``labels_per_batch`` a step need more: ``max(steps, ceil(label_epochs * n_labels /
    labels_per_batch))``. A cycle's labels grow (its own and every earlier cycle's); at a fixed step
    count each is seen less often: SmolLM2's c1 drew each of its ~74 labels 7.5 times, its c2 each
    of ~239 labels 2.3 times and moved validation by 0.01-0.02 (docs/measurements.md)."""
    if label_epochs <= 0 or n_labels == 0 or labels_per_batch == 0:
        return steps
    return max(steps, math.ceil(label_epochs * n_labels / labels_per_batch))


def _guard_numbers(curve: list[dict]) -> dict:
    """The progress rule's view of the first and last checks as flat numbers: accuracy on the
    questions being moved and on the mastered forms, and how many forms the start masters."""
    first, last = curve[0], curve[-1]
    out = {"val_mastered_forms": len(first.get("mastered_forms", [])), "initial_val_moving": first["moving_accuracy"],
           "final_val_moving": last["moving_accuracy"]}
    if "retention_accuracy" in first:
        out |= {"initial_val_retention": first["retention_accuracy"], "final_val_retention": last["retention_accuracy"]}
    return out


def train_expert_iteration(model_dir: str | Path, labels: list[Rollout], replay: list[Rollout], others: list[Rollout],
                           validate: Validate, config: TrainConfig, out_dir: str | Path, on_step=None) -> dict:
    """Train the model in ``model_dir`` (see the module docstring) and save the kept model to
    ``out_dir``.

    Args:
        labels: the Solver's verified completions (prompt, completion): this cycle's and earlier ones,
            and the Solver rows earlier cycles distilled from their MASS team (``stages.train.train_rl``).
        replay: earlier rows to mix in (the warm start's transcripts).
        others: rollouts of the other roles carrying ``advantage``; those above zero are imitated.
        validate: ``validate(model, tokenizer) -> [0/1 per validation question]`` (the stage's).
        config: ``rl.TrainConfig``: ``rl`` (steps, label_epochs, batch_size, learning_rate, retry_rate, warmup_steps,
            decay_steps, min_lr_ratio, replay_fraction, other_roles_fraction, max_grad_norm,
            selection), ``lora``, ``seed``, ``max_model_len`` and ``train_precision``.
        on_step: ``on_step(step, metrics)`` after each update (loss, learning rate) and after the
            validation at the end (``val_accuracy``, ``val_p_vs_start``); a retry's keys carry ``retry_``.

    Returns a summary (``trained``, ``steps``, ``rows_*``, ``batch_*``, ``best_step``, ``attempts``,
    ``kept_learning_rate`` (0 when the start was kept),
    ``best_val_accuracy``, ``initial_val_accuracy``, ``final_val_accuracy``, ``val_curve``,
    ``loss_curve``, ``seconds``), also written as ``out_dir/rl.json``. With nothing to train on (or
    ``rl.steps`` = 0) the input model is saved unchanged (``trained`` False).
    """
    t0 = time.time()
    rl = config.rl
    out_dir = Path(out_dir)
    better = [r for r in others if (r.advantage or 0.0) > 0.0]
    counts = {"rows_labels": len(labels), "rows_replay": len(replay), "rows_other_roles": len(better)}
    model, tok = load_policy(model_dir, config.lora)
    if rl.steps == 0 or not (labels or better):
        save_policy(model, tok, out_dir)
        summary = {"trained": False, "steps": 0, **counts,
                   "reason": "rl.steps = 0" if rl.steps == 0 else "no verified self-labels and no rollouts of other roles"}
        write_model_summary(out_dir / "rl.json", summary)
        return summary
    n_labels, n_replay, n_others = batch_plan(rl.batch_size, bool(labels), bool(replay), bool(better), rl.replay_fraction,
                                              rl.other_roles_fraction)
    steps = training_steps(rl.steps, rl.label_epochs, len(labels), n_labels)

    def draw(rng: random.Random) -> list[Rollout]:
        return ([rng.choice(labels) for _ in range(n_labels)] + [rng.choice(replay) for _ in range(n_replay)]
                + [rng.choice(better) for _ in range(n_others)])

    import torch

    rates = [rl.learning_rate] + ([rl.learning_rate * rl.retry_rate] if rl.retry_rate > 0 else [])
    select = CheckpointSelector(model, tok, validate, rl, checks=len(rates))
    select.check(0)
    attempt = 0
    for rate in rates:
        if attempt:
            if select.best_step != 0:
                break
            log.warning("the guard refused the run at learning rate %.3g; training again from the start at %.3g", rates[0], rate)
            model.load_state_dict(select.best_state)
        attempt += 1
        # a retry's curve goes under keys of its own ("retry_loss", ...): on the same steps as the
        # first run's, it would overlap that curve in MLflow's step chart
        log_step = on_step if attempt == 1 or not on_step else (lambda s, m: on_step(s, {f"retry_{k}": v for k, v in m.items()}))
        torch.manual_seed(config.seed)
        loss_curve = fit(model, tok, draw, steps=steps, learning_rate=rate, warmup_steps=rl.warmup_steps,
                         decay_steps=rl.decay_steps, min_lr_ratio=rl.min_lr_ratio, max_length=config.max_model_len,
                         seed=config.seed, precision=config.train_precision, max_grad_norm=rl.max_grad_norm,
                         desc=f"train_rl (expert iteration, lr {rate:.3g})", on_step=log_step)
        entry = select.check(steps)  # the curve's own entry: the attempt and its rate go into the curve with it
        entry.update(attempt=attempt, learning_rate=rate)
        slipped = slipped_forms(select.curve, select.allowance)
        if select.best_step == 0 and slipped:
            log.warning("the retention guard kept the starting model: mastered forms that slipped (start -> trained): %s",
                        ", ".join(f"{f} {a:.3f} -> {b:.3f}" for f, (a, b) in slipped.items()))
        if log_step:
            log_step(steps, {"val_accuracy": entry["accuracy"], "val_p_vs_start": entry["p_vs_start"]})
    select.save_best(model, tok, out_dir)
    summary = {"trained": True, "algorithm": "expert_iteration", "steps": steps, **counts,
               "batch_labels": n_labels, "batch_replay": n_replay, "batch_other_roles": n_others,
               "best_step": select.best_step, "best_val_accuracy": select.best_accuracy, "attempts": attempt,
               "kept_learning_rate": entry["learning_rate"] if select.best_step else 0.0,
               "initial_val_accuracy": select.curve[0]["accuracy"], "final_val_accuracy": entry["accuracy"],
               "final_val_p_vs_start": entry["p_vs_start"], **_guard_numbers(select.curve), "slipped_forms": slipped, "val_curve": select.curve, "loss_curve": loss_curve,
               "seconds": round(time.time() - t0, 2)}
    write_model_summary(out_dir / "rl.json", summary)
    return summary
