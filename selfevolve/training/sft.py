"""Supervised fine-tuning on chats with assistant-only loss (TRL ``SFTTrainer``), optionally with LoRA.

Used for MASS trajectories (``selfevolve.mass.sft_data``) and any other chat data: every
non-assistant turn is masked from the loss through the chat template's ``{% generation %}``
markers (TRL ``assistant_only_loss=True``). With ``lora.enabled`` a peft LoRA adapter is trained
and merged (``merge_and_unload``) before saving, so the output is always a plain model directory
that ``AutoModelForCausalLM.from_pretrained`` loads. On a machine without CUDA TRL must be told
``bf16=False, use_cpu=True`` (its default bf16 fails on CPU; see ENVIRONMENT.md).
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from selfevolve.inputs import check_model_dir
from selfevolve.records import Rollout
from selfevolve.training.rl import training_attention

Chat = list[dict[str, str]]

# A ChatML template that writes each turn in one expression (SmolLM2 and others): '<|im_start|>' + role + NL +
# content + '<|im_end|>' + NL, NL written as an escape or a literal newline.
_NL = r"(?:'\\n'|'\n')"
_CHATML_TURN = re.compile(r"\{\{\s*'<\|im_start\|>'\s*\+\s*message\['role'\]\s*\+\s*" + _NL + r"\s*\+\s*message\['content'\]"
                          r"\s*\+\s*'<\|im_end\|>'\s*\+\s*" + _NL + r"\s*\}\}")
_CHATML_TRAINING_TURN = ("{{'<|im_start|>' + message['role'] + '\\n'}}{% if message['role'] == 'assistant' %}{% generation %}"
                         "{{message['content'] + '<|im_end|>'}}{% endgeneration %}{% else %}{{message['content'] + '<|im_end|>'}}"
                         "{% endif %}{{'\\n'}}")
_PROBE_CHAT = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"},
               {"role": "assistant", "content": "a2"}]


def training_chat_template(tokenizer) -> str | None:
    """A chat template that marks assistant tokens with ``{% generation %}`` (what assistant-only
    loss needs) and renders exactly as the tokenizer's own: ``None`` when the template already has
    the markers, TRL's training template for the model families it knows
    (``trl.chat_template_utils.get_training_chat_template``), else, for a ChatML template that writes
    each turn in one expression, the same template with the assistant content wrapped in markers.
    Raises ``ValueError`` when none applies (the message says to add the markers by hand)."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if isinstance(template, str) and has_generation_markers(template):
        return None
    try:
        return get_training_chat_template(tokenizer)
    except ValueError as exc:
        if not isinstance(template, str) or len(_CHATML_TURN.findall(template)) != 1:
            raise ValueError(f"the chat template marks no assistant tokens and cannot be patched ({exc}); "
                             "add {% generation %} ... {% endgeneration %} around the assistant content") from None
    patched = _CHATML_TURN.sub(lambda _: _CHATML_TRAINING_TURN, template)
    if tokenizer.apply_chat_template(_PROBE_CHAT, tokenize=False, chat_template=patched) != \
            tokenizer.apply_chat_template(_PROBE_CHAT, tokenize=False):
        raise ValueError("patching the ChatML template with generation markers changed what it renders; "
                         "add {% generation %} ... {% endgeneration %} around the assistant content by hand")
    return patched


def assistant_token_mask(tokenizer, chat: Chat) -> tuple[list[int], list[int]]:
    """Tokenise ``chat`` with the tokenizer's chat template and return ``(input_ids, mask)``, both of
    length T; ``mask[t] == 1`` exactly for tokens inside ``{% generation %}`` blocks (assistant content
    and its end-of-turn token), 0 for system/user/tool turns and role markers. This is the mask TRL's
    ``assistant_only_loss`` applies (labels of mask-0 tokens are -100).

    Raises ``ValueError`` when the template has no generation markers (the mask would be all zeros).
    """
    out = tokenizer.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids = list(out["input_ids"])
    mask = [int(x) for x in out["assistant_masks"]]
    if any(m.get("role") == "assistant" for m in chat) and not any(mask):
        raise ValueError("the chat template marks no assistant tokens; it needs {% generation %} ... {% endgeneration %}")
    return ids, mask


def _copy_model(model_dir: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in model_dir.iterdir():
        target = out_dir / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)


def with_replay(chats: Sequence[Chat], rows: Sequence[Rollout], fraction: float, rng: random.Random) -> list[Chat]:
    """``chats`` plus ``round(len(chats) * fraction / (1 - fraction))`` replayed rows drawn from
    ``rows`` without replacement (all of them when there are fewer), each as
    ``[user: prompt, assistant: completion]``, shuffled together; so ``fraction`` of the result is
    replay. The replay protects what the model masters (the warm start's transcripts, earlier
    cycles' self-labels), as ``rl.replay_fraction`` does for expert iteration and Lee et al. 2025
    do by replaying every earlier round. Measured on the default campaign (seed 1, c2, 135 chats of
    a Planner -> Solver champion): without replay validation on the moving forms rose 0.374 ->
    0.438 and the step was refused for the mastered forms; half replay and 40 steps: 0.465, kept
    (docs/measurements.md). Raises ``ValueError`` for ``fraction`` outside [0, 1)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"replay fraction must be in [0, 1), got {fraction}")
    n = min(len(rows), round(len(chats) * fraction / (1.0 - fraction)))
    out = [list(c) for c in chats] + [[{"role": "user", "content": r.prompt}, {"role": "assistant", "content": r.completion}]
                                      for r in rng.sample(list(rows), n)]
    rng.shuffle(out)
    return out


def train_sft(model_dir: str | os.PathLike, chats: Sequence[Chat], out_dir: str | os.PathLike, sft, lora, seed: int = 0,
              *, max_length: int | None = None) -> dict[str, Any]:
    """Fine-tune the model in ``model_dir`` on ``chats`` and save it to ``out_dir``.

    Args:
        model_dir: a Hugging Face model directory (weights + tokenizer with a chat template that has
            ``{% generation %}`` markers).
        chats: conversations ``[{"role", "content"}, ...]`` with at least one assistant turn each.
        out_dir: where the trained model and tokenizer are written (``save_pretrained``).
        sft: ``config.SFTParams`` (steps, batch_size, learning_rate).
        lora: ``config.LoraParams`` (enabled, r, alpha, dropout, target_modules).
        seed: trainer seed (data order, initialisation of LoRA weights).
        max_length: token cap per chat (default: the model's ``max_position_embeddings``, at most 2048).

    Returns a summary: ``trained`` (False when there was nothing to do: zero chats or ``sft.steps``
    == 0, the input model is copied unchanged and ``reason`` says why), ``n_chats``, ``steps``,
    ``train_loss``, ``runtime_s``, ``lora``, ``assistant_tokens`` and ``total_tokens`` (over the data
    after truncation), ``device``, ``out_dir``.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist")
    chats = [list(c) for c in chats]
    summary: dict[str, Any] = {"n_chats": len(chats), "steps": 0, "train_loss": None, "runtime_s": 0.0,
                               "lora": bool(lora.enabled), "out_dir": str(out_dir), "assistant_tokens": 0, "total_tokens": 0}
    if not chats or sft.steps == 0:
        _copy_model(model_dir, out_dir)
        reason = "no chats to train on" if not chats else "sft.steps is 0"
        return {**summary, "trained": False, "reason": f"{reason}; copied {model_dir} unchanged", "device": "none"}

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    t0 = time.time()
    check_model_dir(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    original_template = tokenizer.chat_template
    tokenizer.chat_template = training_chat_template(tokenizer) or original_template
    model = training_attention(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    if max_length is None:
        max_length = min(int(getattr(model.config, "max_position_embeddings", 1024) or 1024), 2048)
    for i, chat in enumerate(chats):
        ids, mask = assistant_token_mask(tokenizer, chat)
        if not any(mask[:max_length]):
            raise ValueError(f"chat {i} has no assistant token within max_length={max_length}")
        summary["assistant_tokens"] += sum(mask[:max_length])
        summary["total_tokens"] += min(len(ids), max_length)

    if lora.enabled:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="sft-", dir=out_dir.parent if out_dir.parent.exists() else None) as work:
        args = SFTConfig(
            output_dir=work, max_steps=sft.steps, per_device_train_batch_size=sft.batch_size,
            learning_rate=sft.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
            assistant_only_loss=True, max_length=max_length, packing=False,
            bf16=False, fp16=False, use_cpu=not cuda, report_to="none", save_strategy="no",
            logging_steps=max(1, min(10, sft.steps)), seed=seed, data_seed=seed,
            dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list([{"messages": c} for c in chats]),
                             processing_class=tokenizer)
        result = trainer.train()
        model = trainer.model
    if lora.enabled:
        model = model.merge_and_unload()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.chat_template = original_template  # the model keeps the template it came with
    tokenizer.save_pretrained(out_dir)
    loss = float(result.training_loss) if result.training_loss is not None else None
    return {**summary, "trained": True, "reason": "", "steps": int(result.global_step),
            "train_loss": loss if loss is None or math.isfinite(loss) else None,
            "runtime_s": round(time.time() - t0, 3), "device": "cuda" if cuda else "cpu"}


#: The distillation step's recipe (``distill_sft``), as measured in docs/measurements.md ("December 6"):
#: 1,800 steps of 16 rows at 5e-4 with 30 warm-up and 360 decay steps; half of each batch the
#: distillation, 0.3 of it the team's own turns (the rest the distillation rows), half replay.
#: Measured ("December 7 (evening)"): at 600 steps a campaign's c1 wrote the team's chains with the
#: low part mis-copied and answered none of the distilled forms; from the same inputs 1,800 steps
#: copied it right and took held-out rungs 0.545 -> 0.576 (+32 / -1, p 8e-9; 6+3 0 -> 0.56, 7+3 0
#: -> 0.69), `reach_50` 9 -> 10; a larger share of chains per batch at 600 steps did not.
DISTILL_STEPS, DISTILL_BATCH, DISTILL_LR, DISTILL_SHARE, DISTILL_TURN_SHARE = 1800, 16, 5e-4, 0.5, 0.3
#: Rows per length-sorted micro-batch of a distillation step (``training.loop.sft_backward``; the
#: gradient is the one padded batch's). Its batches mix chains of 250-480 tokens with replayed rows
#: of ~100: padded as one batch of 16 (``MICRO_BATCH_ROWS``) a step took 793-838 ms, cut into two
#: of 8 484-525 ms, into four of 4 450-536 ms (seed 0's c4 distillation, one thread;
#: docs/measurements.md "The distillation in two micro-batches").
DISTILL_MICRO_BATCH_ROWS = 8


def distill_sft(model_dir: str | os.PathLike, rows: Sequence[Rollout], replay: Sequence[Rollout], out_dir: str | os.PathLike, *,
                lora, turns: Sequence[Rollout] = (), seed: int = 0, precision: str = "float32", max_length: int = 1024,
                steps: int = DISTILL_STEPS, batch_size: int = DISTILL_BATCH, learning_rate: float = DISTILL_LR,
                share: float = DISTILL_SHARE, turn_share: float = DISTILL_TURN_SHARE) -> dict[str, Any]:
    """Fine-tune the model in ``model_dir`` on ``rows`` (a MASS champion distilled into the single
    pass: ``selfevolve.mass.distill``) and ``turns`` (the champion's agents' own turns, each in its
    own context: ``selfevolve.mass.sft_data``) with replay, and save it to ``out_dir``.

    Each of ``steps`` batches of ``batch_size`` rows draws every row, independently: from ``turns``
    with probability ``turn_share`` (none: from ``rows`` instead), from ``rows`` up to ``share`` in
    all, else from ``replay`` (the warm start's transcripts and the Solver's labels: what the model
    already does stays), each uniformly; completion-token NLL on
    ``selfevolve.training.loop.fit``'s warm-up / stable / decay schedule. A new way of answering
    (the team's whole run as one reply) needs many more updates than a cycle's SFT on the
    champion's chats (``sft.steps``): measured, 115-600 chains at 1e-4 to 5e-4 over 150-300 steps
    broke one pass; 2,325 at this recipe carried the team's reach into it. The turns keep the
    team's roles, which share the model: without them the chains leaked into the part solvers'
    turns (the split team 0.82 -> 0.12 at a campaign's c2); with the champion's pool chats only,
    at 0.175 of each batch it kept 0.755, at 0.083 it fell to 0.165; at a campaign's c1, the chats
    at 0.175 / 0.3: 0.575 / 0.70, and with the distilled runs' own turns beside them at 0.3: 0.95
    (0.85 before the step). Returns ``{"trained", "steps", "rows", "turn_rows", "replay_rows",
    "final_loss", "seconds"}``. Raises ``ValueError`` when ``rows`` is empty, ``share`` is not in
    (0, 1] or ``turn_share`` not in [0, ``share``)."""
    from selfevolve.training.loop import fit
    from selfevolve.training.rl import load_policy, save_policy

    if not rows:
        raise ValueError("nothing to distil: no rows")
    if not 0.0 < share <= 1.0:
        raise ValueError(f"the distillation share must be in (0, 1], got {share}")
    if not 0.0 <= turn_share < share:
        raise ValueError(f"the turns' share must be in [0, share={share}), got {turn_share}")
    t0 = time.time()
    rows, turns, replay = list(rows), list(turns), list(replay)
    model, tok = load_policy(model_dir, lora)

    def draw(rng: random.Random) -> list[Rollout]:
        out = []
        for _ in range(batch_size):
            x = rng.random()
            out.append(rng.choice(turns) if turns and x < turn_share else rng.choice(rows) if not replay or x < share
                       else rng.choice(replay))
        return out

    curve = fit(model, tok, draw, steps=steps, learning_rate=learning_rate, warmup_steps=min(30, steps // 5),
                decay_steps=steps // 5, min_lr_ratio=0.01, max_length=max_length, seed=seed, precision=precision,
                desc="train_sft (distillation)", micro_batch_rows=DISTILL_MICRO_BATCH_ROWS)
    save_policy(model, tok, Path(out_dir))
    return {"trained": True, "steps": steps, "rows": len(rows), "turn_rows": len(turns), "replay_rows": len(replay),
            "final_loss": curve[-1]["loss"] if curve else None, "seconds": round(time.time() - t0, 2)}
