"""RL on stored rollouts: Task-Relative REINFORCE++ (default) and GRPO (through TRL).

Task-Relative REINFORCE++ (SAGE paper; REINFORCE++: Hu 2025, arXiv:2501.03262): each rollout's
advantage is its reward normalised within its *role* over the cycle's rollouts
(``selfevolve.training.advantages.role_advantages``), broadcast to every completion token. The loss is the PPO-style clipped surrogate on the token probability ratio against the
behaviour policy (the model that generated the rollouts),

    L = - mean_tokens[ min(rho * A, clip(rho, 1 - eps, 1 + eps) * A) ] + kl_coef * mean_tokens[ k3 ]

with ``rho = exp(logp - logp_old)`` (log-probs of the policy at the rollouts' sampling temperature,
``softmax(logits / T)``, as TRL's GRPO computes them) and the k3 KL estimator ``exp(q) - q - 1``, ``q = logp_ref - logp``
(the reference is the behaviour model). The fresh AdamW optimizer warms up linearly over
``rl.warmup_steps``. Every ``eval_every`` steps the greedy accuracy on validation questions is
measured and the best checkpoint (step 0 included) is kept when its gain over step 0 is
significant (``CheckpointSelector``): the SAGE paper saw validation accuracy peak and then fall.

What is validated and kept is an exponential moving average of the weights (``rl.ema_decay``;
Polyak & Juditsky 1992), not the last iterate: on the embedded tiny model the raw weights'
greedy accuracy swings by several points between checks (each update moves every weight by about
the learning rate, whatever the signal), and the average keeps the consistent direction.
Measured on 400 held-out questions (Solver rollouts of 1,024 arith questions x 8 samples,
REINFORCE++ lr 1e-4, checks every 50 steps, same run): raw weights 0.31, 0.305, 0.355, 0.318;
average (decay 0.97) 0.33, 0.355, 0.352, 0.37, from 0.34 (on 1,200 questions the averaged model
stayed within noise of the start: the average buys stability, not accuracy).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import logging
import random
import time
from pathlib import Path
from typing import Callable, Sequence

from selfevolve.config import LoraParams, RLParams
from selfevolve.inputs import check_model_dir
from selfevolve.records import Question, Rollout, write_model_summary
from selfevolve.training.batches import build_batch, token_logprobs
from selfevolve.training.config import TrainConfig

Validate = Callable[[object, object], list[int]]
"""``validate(model, tokenizer) -> [0/1 per validation question]``: greedy correctness of a model
being trained (given by the stage, so training knows nothing of evaluation)."""

log = logging.getLogger(__name__)


def reinforce_pp_loss(logp, old_logp, ref_logp, advantages, mask, clip_eps: float = 0.2, kl_coef: float = 0.0):
    """Clipped REINFORCE++ surrogate with optional k3 KL, averaged over completion tokens.

    Shapes: ``logp``, ``old_logp``, ``ref_logp``, ``mask`` [B, T]; ``advantages`` [B].
    Returns (loss scalar, stats dict with ``clip_frac`` and ``kl``).
    """
    import torch

    adv = advantages[:, None]
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    q = ref_logp - logp
    kl = torch.exp(q) - q - 1
    per_tok = -surrogate + kl_coef * kl
    denom = mask.sum().clamp(min=1)
    loss = (per_tok * mask).sum() / denom
    with torch.no_grad():
        clip_frac = (((ratio - 1).abs() > clip_eps).float() * mask).sum() / denom
        kl_mean = (kl * mask).sum() / denom
    return loss, {"clip_frac": float(clip_frac), "kl": float(kl_mean)}


def policy_update(model, optimizer, tokenizer, batch: list[Rollout], behaviour_logprobs: dict, config: TrainConfig):
    """One Task-Relative REINFORCE++ update (``rl.epochs_per_batch`` gradient steps) on ``batch``.

    ``behaviour_logprobs`` maps rollout id -> 1-D tensor of the behaviour model's next-token
    log-probs over that rollout's tokenised sequence (also the KL reference). Returns (last loss
    tensor, stats dict).
    """
    import torch

    rl = config.rl
    ids, attn, cmask = build_batch(tokenizer, batch, config.max_model_len)
    old_lp = torch.zeros(cmask.shape)
    for j, r in enumerate(batch):
        o = behaviour_logprobs[r.id][: cmask.shape[1]]
        old_lp[j, : len(o)] = o
    adv = torch.tensor([r.advantage for r in batch], dtype=torch.float)
    for _ in range(rl.epochs_per_batch):
        logp = token_logprobs(model, ids, attn, config.temperature)
        loss, stats = reinforce_pp_loss(logp, old_lp, old_lp, adv, cmask, rl.clip_eps, rl.kl_coef)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), rl.max_grad_norm)
        optimizer.step()
    return loss, stats


def behaviour_logprobs(model, tokenizer, rollouts: list[Rollout], max_length: int, chunk: int = 32,
                       temperature: float = 1.0) -> dict:
    """Next-token log-probs of each rollout under ``model`` sampled at ``temperature`` (no grad):
    rollout id -> 1-D tensor."""
    import torch

    out = {}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(rollouts), chunk):
            part = rollouts[i:i + chunk]
            ids, attn, _ = build_batch(tokenizer, part, max_length)
            lp = token_logprobs(model, ids, attn, temperature)
            for j, r in enumerate(part):
                out[r.id] = lp[j, : int(attn[j].sum()) - 1].clone()
    model.train(was_training)
    return out


def weight_average(model, decay: float):
    """An exponential moving average of ``model``'s weights (``torch.optim.swa_utils.AveragedModel``,
    ``w_avg <- decay * w_avg + (1 - decay) * w`` on each ``update_parameters(model)``), or None when
    ``decay`` is 0. Its ``.module`` is a model of the same class with the averaged weights."""
    if not decay:
        return None
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))


def warmup_schedule(optimizer, warmup_steps: int):
    """Linear learning-rate warm-up from ``1 / warmup_steps`` of the rate to all of it, then constant."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup_steps)))


def check_steps(rl) -> set[int]:
    """Steps after which validation runs: every ``rl.eval_every`` steps and the last step."""
    return set(range(rl.eval_every, rl.steps + 1, rl.eval_every)) | {rl.steps}


def training_attention(model):
    """Train with eager attention where no GPU is: PyTorch's CPU flash-attention backward (what
    ``sdpa`` runs) took 31 % of a warm-start step, and eager steps were 1.45x faster on the tiny
    model and 1.1x on SmolLM2-135M, same loss (docs/measurements.md, training speed). Not saved with
    the model: inference loads keep the library's default. Returns ``model``."""
    import torch

    if not torch.cuda.is_available():
        model.set_attn_implementation("eager")
    return model


def load_policy(model_dir: str | Path, lora: LoraParams):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_dir(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = training_attention(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    if lora.enabled:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    return model, tok


def save_policy(model, tok, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


@dataclass(frozen=True)
class Validation:
    """A validation callback that also says what each of its questions is.

    ``run(model, tokenizer)`` gives the greedy 0/1 outcome per validation question (the same
    questions at every call); ``forms[i]`` is question ``i``'s form (the arith ladder's ``"2+1"``;
    None when it has none), the unit in which :func:`retention_flags` decides what the starting
    model already masters. Callable like a plain ``Validate``. ``key``
    (``training.saved_validation.validation_key``): what the outcome depends on besides the weights;
    with it the kept checkpoint's outcome is saved beside its weights. ``known_start``: the starting
    weights' outcome when it was saved with them; step 0 then reads it instead of answering again."""

    run: Validate
    forms: tuple[str | None, ...] = ()
    key: str = ""
    known_start: tuple[int, ...] | None = None

    def __call__(self, model, tokenizer) -> list[int]:
        return self.run(model, tokenizer)


def form_accuracy(correct: Sequence[int], forms: Sequence[str | None]) -> dict[str, float]:
    """Validation accuracy per form (``{"4+3": 0.97, ...}``, sorted by form) of one outcome; questions
    without a form, or flags of another length, give ``{}``."""
    if len(forms) != len(correct):
        return {}
    outcomes: dict[str, list[int]] = defaultdict(list)
    for c, f in zip(correct, forms):
        if f is not None:
            outcomes[f].append(int(c))
    return {f: sum(cs) / len(cs) for f, cs in sorted(outcomes.items())}


def retention_flags(start: Sequence[int], forms: Sequence[str | None], mastered: float) -> list[bool]:
    """Which validation questions guard retention: those whose form the starting model answers at
    least ``mastered`` of the time (its accuracy over that form's questions in ``start``, the 0/1
    outcome per question); every other question, and every one without a form, is being moved.
    Without forms of the same length as ``start`` no question guards retention.

    Per form, not per split: measured on SmolLM2-135M-Instruct, a cycle took 2+1 digits from 0.48
    to 0.80 and 1+1 from 0.98 to 0.56; the seed split as a whole (1+1, 2+1, 1+2) rose, so a guard
    on it kept the model that had lost the one form it mastered (docs/measurements.md)."""
    if len(forms) != len(start):
        return [False] * len(start)
    kept = {f for f, accuracy in form_accuracy(start, forms).items() if accuracy >= mastered - 1e-9}
    return [f is not None and f in kept for f in forms]


def split_accuracy(correct: Sequence[int], retention: Sequence[bool]) -> tuple[float, float | None]:
    """(accuracy on the questions being moved, accuracy on the retention questions or None when
    there are none) of one validation outcome; without flags of the same length every question
    counts as moving."""
    flags = list(retention) if len(retention) == len(correct) else [False] * len(correct)
    moving = [c for c, r in zip(correct, flags) if not r]
    kept = [c for c, r in zip(correct, flags) if r]
    return (sum(moving) / len(moving) if moving else 0.0), (sum(kept) / len(kept) if kept else None)


def slipped_forms(curve: Sequence[dict], tolerance: float) -> dict[str, list[float]]:
    """The mastered forms (step 0's ``mastered_forms``) whose accuracy at the last check is more than
    ``tolerance`` below step 0's: ``{form: [start, last]}``; what a refusal by the retention guard
    lost, form by form."""
    if len(curve) < 2:
        return {}
    first, last = curve[0].get("form_accuracy", {}), curve[-1].get("form_accuracy", {})
    return {f: [first[f], last[f]] for f in curve[0].get("mastered_forms", [])
            if f in first and f in last and last[f] < first[f] - tolerance - 1e-9}


def retained(start: float | None, candidate: float | None, tolerance: float) -> bool:
    """The retention guard: ``candidate`` accuracy at most ``tolerance`` below ``start`` (True when
    either is None: nothing to guard)."""
    return start is None or candidate is None or candidate >= start - tolerance - 1e-9


def retention_allowance(tolerance: float, slack: int, questions: int) -> float:
    """The accuracy the retention questions may lose: ``tolerance`` (``rl.retention_tolerance``),
    or ``slack`` of the ``questions`` retention questions (``rl.retention_slack``) when that is more.

    At a few mastered questions a tolerance is no allowance at all: SmolLM2's 1+1 sums have 16
    validation questions, 0.04 of them is less than one, and a training step that moved 2+1 digits
    0.56 -> 0.79 on validation was refused for 14 -> 12 right on 1+1 while held-out 1+1 held at 0.96
    (docs/measurements.md). On hundreds of questions the tolerance is the larger and rules alone."""
    return max(tolerance, slack / questions) if questions else tolerance


def progress_kept(start: Sequence[int], candidate: Sequence[int], retention: Sequence[bool], tolerance: float,
                  slack: int = 0) -> bool:
    """The ``progress`` rule of :class:`CheckpointSelector` for one candidate against the start:
    accuracy on the questions being moved not lower, accuracy on the retention questions (the forms
    the start masters: :func:`retention_flags`) at most :func:`retention_allowance` lower."""
    m0, r0 = split_accuracy(start, retention)
    m1, r1 = split_accuracy(candidate, retention)
    return m1 >= m0 and retained(r0, r1, retention_allowance(tolerance, slack, sum(map(bool, retention))))


def snapshot(model) -> dict:
    """A detached copy of ``model.state_dict()`` (tensors cloned, same devices and dtypes), to restore
    with ``model.load_state_dict`` after training moved on."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class CheckpointSelector:
    """Which checkpoint of a training run is kept (``rl.selection``); step 0, the starting model,
    is the incumbent.

    * ``progress`` (default): a checkpoint replaces the incumbent when its accuracy on the
      validation questions being moved is at least the incumbent's, and its accuracy on the forms
      the starting model masters (:func:`retention_flags`: ``rl.mastered_accuracy`` at step 0)
      has not fallen more than :func:`retention_allowance` below the starting model's. Continued
      training is the default, as in Lee et al. 2025 (arXiv 2502.01612, no accept/reject gate
      between rounds); the guard keeps what the model already masters. Measured: a McNemar gate
      on validation half of which is saturated seed forms refused the second and third cycles'
      training (docs/measurements.md).
      Without forms (a plain ``Validate``) every question counts as moving and the guard is off.
    * ``significant``: a checkpoint replaces the kept one when its accuracy over all validation
      questions is the highest so far *and* beats step 0 with an exact McNemar p-value below
      ``rl.select_p / k`` (``selfevolve.stats.mcnemar_exact``), ``k`` the number of later checks
      (``checks``, default every ``rl.eval_every`` steps; Bonferroni). ``rl.select_p`` = 1.0 is plain
      best accuracy.

    ``check(step)`` validates ``model`` and returns the curve entry ``{step, accuracy, p_vs_start,
    moving_accuracy, retention_accuracy, form_accuracy}`` (retention only when the start masters a
    form, ``form_accuracy`` per form when the questions have forms); step 0's
    also ``mastered_forms``; ``curve``, ``best_step``, ``best_accuracy`` and ``best_state`` hold the
    outcome.
    """

    def __init__(self, model, tokenizer, validate: Validate | Validation, rl: RLParams, checks: int | None = None):
        self.model, self.tok, self.validate = model, tokenizer, validate
        k = checks if checks is not None else len(check_steps(rl))
        self.threshold = rl.select_p if rl.select_p >= 1.0 else rl.select_p / k
        self.rule, self.tolerance, self.mastered = rl.selection, rl.retention_tolerance, rl.mastered_accuracy
        self.slack = rl.retention_slack
        self.allowance = rl.retention_tolerance  # what retention may lose: retention_allowance, once step 0 says how many guard it
        self.forms = list(validate.forms) if isinstance(validate, Validation) else []
        self.retention: list[bool] = []
        self.start: list[int] | None = None
        self.start_retention: float | None = None
        self.curve: list[dict] = []
        self.best_step, self.best_accuracy, self.best_state = 0, 0.0, None
        self.best_correct: list[int] | None = None
        self.best_moving = 0.0

    def _correct(self) -> list[int]:
        if self.start is None and isinstance(self.validate, Validation) and self.validate.known_start is not None:
            return list(self.validate.known_start)
        was_training = self.model.training
        self.model.eval()
        correct = [int(c) for c in self.validate(self.model, self.tok)]
        self.model.train(was_training)
        return correct

    def check(self, step: int) -> dict:
        from selfevolve.stats import mcnemar_exact

        correct = self._correct()
        acc = sum(correct) / len(correct) if correct else 0.0
        if self.start is None:
            self.retention = retention_flags(correct, self.forms, self.mastered)
            self.allowance = retention_allowance(self.tolerance, self.slack, sum(self.retention))
        moving, kept = split_accuracy(correct, self.retention)
        extra = {"moving_accuracy": moving, **({"retention_accuracy": kept} if kept is not None else {}),
                 **({"form_accuracy": per_form} if (per_form := form_accuracy(correct, self.forms)) else {})}
        if self.start is None:
            self.start = correct
            self.start_retention = kept
            mastered = sorted({f for f, r in zip(self.forms, self.retention) if r})
            entry = {"step": step, "accuracy": acc, "p_vs_start": 1.0, **extra, "mastered_forms": mastered}
            self._keep(step, acc, moving, correct)
        else:
            p, _, _ = mcnemar_exact(self.start, correct)
            entry = {"step": step, "accuracy": acc, "p_vs_start": p, **extra}
            if self.rule == "progress":
                if moving >= self.best_moving and retained(self.start_retention, kept, self.allowance):
                    self._keep(step, acc, moving, correct)
            elif acc > self.best_accuracy and p < self.threshold:  # best_accuracy >= step 0's
                self._keep(step, acc, moving, correct)
        self.curve.append(entry)
        return entry

    def _keep(self, step: int, acc: float, moving: float, correct: list[int]) -> None:
        self.best_step, self.best_accuracy, self.best_moving, self.best_correct = step, acc, moving, correct
        self.best_state = snapshot(self.model)

    def save_best(self, model, tok, out_dir: Path) -> None:
        """Load the kept checkpoint into ``model`` (the policy; the selector may watch its average)
        and save it to ``out_dir``, with its validation outcome beside the weights when the
        validation has a ``key`` (``training.saved_validation``; not for a LoRA policy, whose saved
        weights are merged and round differently from those validated)."""
        from selfevolve.training.saved_validation import save_validation

        model.load_state_dict(self.best_state)
        merged = hasattr(model, "merge_and_unload")
        save_policy(model, tok, out_dir)
        if isinstance(self.validate, Validation) and self.validate.key and self.best_correct is not None and not merged:
            save_validation(out_dir, self.validate.key, self.best_correct)


def train_reinforce_pp(model_dir: str | Path, rollouts: list[Rollout], validate: Validate, config: TrainConfig,
                       out_dir: str | Path, on_step=None) -> dict:
    """Train with Task-Relative REINFORCE++ on rollouts that already carry advantages; save the
    best checkpoint by validation accuracy to ``out_dir``.

    Returns a summary: ``steps``, ``best_step``, ``best_val_accuracy``, ``val_curve``
    ([{step, accuracy}]), ``loss_curve``, ``seconds``. With no rollouts the input model is saved
    unchanged (``trained`` False). ``on_step(step, metrics)`` is called after each update.
    """
    import torch
    from tqdm import tqdm

    t0 = time.time()
    rl = config.rl
    out_dir = Path(out_dir)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    model, tok = load_policy(model_dir, config.lora)

    if not rollouts or rl.steps == 0:
        save_policy(model, tok, out_dir)
        summary = {"trained": False, "reason": "no rollouts with reward spread" if not rollouts else "rl.steps = 0", "steps": 0}
        write_model_summary(out_dir / "rl.json", summary)
        return summary

    # Behaviour (= reference) log-probs, computed once with the model that generated the rollouts.
    old = behaviour_logprobs(model, tok, rollouts, config.max_model_len, temperature=config.temperature)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=rl.learning_rate, weight_decay=0.0)
    schedule = warmup_schedule(opt, rl.warmup_steps)
    average = weight_average(model, rl.ema_decay)
    select = CheckpointSelector(average.module if average else model, tok, validate, rl)
    select.check(0)
    loss_curve, checks = [], check_steps(rl)
    for step in tqdm(range(1, rl.steps + 1), desc="train_rl", unit="step"):
        batch = rng.sample(rollouts, min(rl.batch_size, len(rollouts)))
        loss, stats = policy_update(model, opt, tok, batch, old, config)
        schedule.step()
        if average:
            average.update_parameters(model)
        rec = {"step": step, "loss": loss.item(), "lr": schedule.get_last_lr()[0], **stats}
        loss_curve.append(rec)
        if on_step:
            on_step(step, rec)
        if step in checks:
            entry = select.check(step)
            if on_step:
                on_step(step, {"val_accuracy": entry["accuracy"], "val_p_vs_start": entry["p_vs_start"]})
    select.save_best(model, tok, out_dir)
    val_curve, best_step, best_acc = select.curve, select.best_step, select.best_accuracy
    summary = {"trained": True, "algorithm": "reinforce_pp", "steps": rl.steps, "rollouts": len(rollouts), "best_step": best_step,
               "best_val_accuracy": best_acc, "initial_val_accuracy": val_curve[0]["accuracy"], "val_curve": val_curve,
               "loss_curve": loss_curve, "seconds": round(time.time() - t0, 2)}
    write_model_summary(out_dir / "rl.json", summary)
    return summary


def train_grpo(model_dir: str | Path, questions: list[Question], validate: Validate, config: TrainConfig,
               out_dir: str | Path) -> dict:
    """GRPO (Shao et al. 2024, DeepSeekMath, group-relative advantages over ``rl.grpo_num_generations``
    samples per prompt) with TRL's ``GRPOTrainer``, online: the Solver prompts of ``questions`` are
    sampled by the policy and rewarded by the external verifiers
    (``r_s = w_gt * s_gt + w_f * r_f``, the Solver reward without a plan). The best checkpoint by
    validation accuracy (step 0 included) is saved to ``out_dir``.
    """
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from selfevolve import rewards as R
    from selfevolve.roles import parsers
    from selfevolve.roles.templates import messages
    from selfevolve.verifiers.grading import verify_answers

    t0 = time.time()
    rl, out_dir = config.rl, Path(out_dir)
    model, tok = load_policy(model_dir, config.lora)
    by_id = {q.id: q for q in questions}
    if not questions or rl.steps == 0:
        save_policy(model, tok, out_dir)
        return {"trained": False, "steps": 0, "reason": "no questions" if not questions else "rl.steps = 0"}
    ds = Dataset.from_list([{"prompt": messages("solver", question=q.text, domain=q.domain, plan=None), "question_id": q.id}
                            for q in questions])

    def reward(completions, question_id, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        qs = [by_id[i] for i in question_id]
        outs = [parsers.parse_solver(t, q.domain) for t, q in zip(texts, qs)]
        verdicts = verify_answers(qs, [o.answer for o in outs], config.verifiers)
        # None (no reward: TRL leaves the sample out) where the verifier itself failed
        return [R.solver_reward(None, v.correct, o.format_reward, config.sage) if v.graded else None
                for v, o in zip(verdicts, outs)]

    average = weight_average(model, rl.ema_decay)
    select = CheckpointSelector(average.module if average else model, tok, validate, rl)
    select.check(0)
    checks = check_steps(rl)

    class _Select(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if average:
                average.update_parameters(model)
            if state.global_step in checks:
                select.check(state.global_step)

    g = rl.grpo_num_generations
    cfg = GRPOConfig(output_dir=str(out_dir.parent / f".{out_dir.name}.trainer"), max_steps=rl.steps,
                     per_device_train_batch_size=max(g, (rl.batch_size // g) * g), num_generations=g,
                     max_completion_length=config.max_new_tokens, learning_rate=rl.learning_rate, beta=rl.kl_coef,
                     lr_scheduler_type="constant_with_warmup", warmup_steps=rl.warmup_steps,
                     epsilon=rl.clip_eps, temperature=config.temperature, bf16=False, use_cpu=not torch.cuda.is_available(),
                     report_to="none", save_strategy="no", logging_steps=max(1, rl.steps // 10), seed=config.seed)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=ds, processing_class=tok, callbacks=[_Select()])
    trainer.train()
    select.save_best(model, tok, out_dir)
    import shutil

    shutil.rmtree(cfg.output_dir, ignore_errors=True)
    summary = {"trained": True, "algorithm": "grpo", "steps": rl.steps, "best_step": select.best_step,
               "best_val_accuracy": select.best_accuracy, "initial_val_accuracy": select.curve[0]["accuracy"],
               "val_curve": select.curve, "seconds": round(time.time() - t0, 2)}
    write_model_summary(out_dir / "rl.json", summary)
    return summary
