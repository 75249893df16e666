"""RL on stored rollouts: Task-Relative REINFORCE++ (default) and GRPO (through TRL).

Task-Relative REINFORCE++ (SAGE paper; REINFORCE++: Hu 2025, arXiv:2501.03262): each rollout's
advantage is its reward normalised within its *role* over the cycle's rollouts,
``A = (r - mean_role) / (std_role + eps)`` (``role_advantages``), broadcast to every completion
token. The loss is the PPO-style clipped surrogate on the token probability ratio against the
behaviour policy (the model that generated the rollouts),

    L = - mean_tokens[ min(rho * A, clip(rho, 1 - eps, 1 + eps) * A) ] + kl_coef * mean_tokens[ k3 ]

with ``rho = exp(logp - logp_old)`` and the k3 KL estimator ``exp(q) - q - 1``, ``q = logp_ref - logp``
(the reference is the behaviour model). Every ``eval_every`` steps the policy's greedy accuracy on
validation questions is measured and the best checkpoint (step 0 included) is kept: the SAGE
paper saw validation accuracy peak and then fall.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
from collections import defaultdict
from pathlib import Path
from statistics import fmean, pstdev

from selfevolve.config import LoraParams, Params
from selfevolve.records import Question, Rollout

log = logging.getLogger(__name__)


def role_advantages(rollouts: list[Rollout], skip_no_spread: bool = True, eps: float = 1e-6) -> list[Rollout]:
    """Fill ``advantage`` by per-role normalisation (Task-Relative REINFORCE++).

    Groups of size > 1 (the Solver's n samples of one prompt) whose rewards are all equal carry
    no signal and are dropped when ``skip_no_spread``; roles whose rewards have no spread are
    dropped too. Returns the kept rollouts (copies), in input order.
    """
    groups = defaultdict(list)
    for r in rollouts:
        groups[r.group].append(r.reward)
    kept = [r for r in rollouts if not (skip_no_spread and len(groups[r.group]) > 1 and pstdev(groups[r.group]) == 0)]
    by_role = defaultdict(list)
    for r in kept:
        by_role[r.role].append(r.reward)
    out = []
    for r in kept:
        rs = by_role[r.role]
        sd = pstdev(rs) if len(rs) > 1 else 0.0
        if sd == 0:
            continue
        out.append(r.model_copy(update={"advantage": (r.reward - fmean(rs)) / (sd + eps)}))
    return out


def build_batch(tokenizer, rows: list[Rollout], max_length: int):
    """Tokenise (prompt via chat template with the generation prompt) + completion + EOS.

    Returns ``input_ids`` [B, T], ``attention_mask`` [B, T], ``completion_mask`` [B, T-1] (1 on
    the positions whose *next* token is a completion token), right-padded, truncated to
    ``max_length`` from the left of the prompt if needed.
    """
    import torch

    seqs, masks = [], []
    for r in rows:
        p = tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}], add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"]
        c = tokenizer(r.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (p + c)[-max_length:]
        n_c = min(len(c), len(ids) - 1)
        seqs.append(ids)
        masks.append([0] * (len(ids) - n_c) + [1] * n_c)
    T = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    attn = torch.zeros((len(seqs), T), dtype=torch.long)
    cmask = torch.zeros((len(seqs), T), dtype=torch.float)
    for i, (s, m) in enumerate(zip(seqs, masks)):
        input_ids[i, :len(s)] = torch.tensor(s)
        attn[i, :len(s)] = 1
        cmask[i, :len(s)] = torch.tensor(m, dtype=torch.float)
    return input_ids, attn, cmask[:, 1:]


def token_logprobs(model, input_ids, attention_mask):
    """Log-probability of each next token: [B, T-1]."""
    import torch

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    return torch.gather(torch.log_softmax(logits, -1), 2, input_ids[:, 1:, None]).squeeze(-1)


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


def _load(model_dir: str | Path, lora: LoraParams):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if lora.enabled:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    return model, tok


def _save(model, tok, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def train_reinforce_pp(model_dir: str | Path, rollouts: list[Rollout], val_questions: list[Question], params: Params,
                       out_dir: str | Path, on_step=None) -> dict:
    """Train with Task-Relative REINFORCE++ on rollouts that already carry advantages; save the
    best checkpoint by validation accuracy to ``out_dir``.

    Returns a summary: ``steps``, ``best_step``, ``best_val_accuracy``, ``val_curve``
    ([{step, accuracy}]), ``loss_curve``, ``seconds``. With no rollouts the input model is saved
    unchanged (``trained`` False). ``on_step(step, metrics)`` is called after each update.
    """
    import torch
    from tqdm import tqdm

    from selfevolve.backends.hf import HFBackend
    from selfevolve.evaluation.solve import solve_and_grade

    t0 = time.time()
    rl = params.rl
    out_dir = Path(out_dir)
    torch.manual_seed(params.seed)
    rng = random.Random(params.seed)
    model, tok = _load(model_dir, params.model.lora)
    val = val_questions[: rl.eval_questions]

    def validate(step: int) -> float:
        model.eval()
        backend = HFBackend.from_pretrained_objects(model, tok)
        _, m = solve_and_grade(backend, val, params, n=1, temperature=0.0)
        model.train()
        return m["accuracy"]

    if not rollouts or rl.steps == 0:
        _save(model, tok, out_dir)
        summary = {"trained": False, "reason": "no rollouts with reward spread" if not rollouts else "rl.steps = 0", "steps": 0}
        (out_dir / "rl.json").write_text(json.dumps(summary, indent=2))
        return summary

    max_len = params.model.max_model_len
    # Behaviour (= reference) log-probs, computed once with the model that generated the rollouts.
    old = {}
    model.eval()
    with torch.no_grad():
        for i in range(0, len(rollouts), 32):
            chunk = rollouts[i:i + 32]
            ids, attn, _ = build_batch(tok, chunk, max_len)
            lp = token_logprobs(model, ids, attn)
            for j, r in enumerate(chunk):
                old[r.id] = lp[j, : int(attn[j].sum()) - 1].clone()
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=rl.learning_rate, weight_decay=0.0)
    best_acc = validate(0)
    best_step, best_state = 0, copy.deepcopy({k: v.detach().clone() for k, v in model.state_dict().items()})
    val_curve, loss_curve = [{"step": 0, "accuracy": best_acc}], []
    for step in tqdm(range(1, rl.steps + 1), desc="train_rl", unit="step"):
        batch = rng.sample(rollouts, min(rl.batch_size, len(rollouts)))
        ids, attn, cmask = build_batch(tok, batch, max_len)
        old_lp = torch.zeros(cmask.shape)
        for j, r in enumerate(batch):
            o = old[r.id][: cmask.shape[1]]
            old_lp[j, : len(o)] = o
        adv = torch.tensor([r.advantage for r in batch], dtype=torch.float)
        for _ in range(rl.epochs_per_batch):
            logp = token_logprobs(model, ids, attn)
            loss, stats = reinforce_pp_loss(logp, old_lp, old_lp, adv, cmask, rl.clip_eps, rl.kl_coef)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), rl.max_grad_norm)
            opt.step()
        rec = {"step": step, "loss": float(loss), **stats}
        loss_curve.append(rec)
        if on_step:
            on_step(step, rec)
        if step % rl.eval_every == 0 or step == rl.steps:
            acc = validate(step)
            val_curve.append({"step": step, "accuracy": acc})
            if on_step:
                on_step(step, {"val_accuracy": acc})
            if acc > best_acc:
                best_acc, best_step = acc, step
                best_state = copy.deepcopy({k: v.detach().clone() for k, v in model.state_dict().items()})
    model.load_state_dict(best_state)
    _save(model, tok, out_dir)
    summary = {"trained": True, "algorithm": "reinforce_pp", "steps": rl.steps, "rollouts": len(rollouts), "best_step": best_step,
               "best_val_accuracy": best_acc, "initial_val_accuracy": val_curve[0]["accuracy"], "val_curve": val_curve,
               "loss_curve": loss_curve, "seconds": round(time.time() - t0, 2)}
    (out_dir / "rl.json").write_text(json.dumps(summary, indent=2))
    return summary
