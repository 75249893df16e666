"""The pieces every supervised training run shares: the completion-token loss, the warm-up /
stable / decay learning-rate schedule, mixed precision on CPU, and a plain fitting loop.

Rows are ``Rollout`` records (prompt, completion): the prompt goes through the model's chat template
with the generation prompt, the completion and EOS follow, and only completion tokens are in the
loss (``selfevolve.training.batches.build_batch``), the same masking TRL's ``assistant_only_loss``
applies to single-turn chats.
"""

from __future__ import annotations

import contextlib
import random
from typing import Callable, Sequence

from selfevolve.backends.rows import common_prefix_length
from selfevolve.records import Rollout
from selfevolve.training.batches import build_batch, encode_rows, pad_batch, token_logprobs


def sft_loss(model, tokenizer, rows: Sequence[Rollout], max_length: int):
    """Mean negative log-likelihood of the completion tokens of ``rows`` (a scalar tensor)."""
    ids, attn, cmask = build_batch(tokenizer, list(rows), max_length)
    logp = token_logprobs(model, ids, attn, 1.0)
    return -(logp * cmask).sum() / cmask.sum().clamp(min=1)


MICRO_BATCH_ROWS = 16
"""Rows per micro-batch of :func:`sft_backward`. Measured on the embedded model (batches of 64 rows
of train_rl, 1 thread, bfloat16 autocast; docs/measurements.md): one padded batch 547 ms a step,
length-sorted micro-batches of 32 rows 356 ms, of 16 rows 346 ms, of 8 rows 410 ms."""


def micro_batches(tokenizer, encoded: Sequence[tuple[list[int], list[int]]], micro_batch_rows: int = MICRO_BATCH_ROWS,
                  share_prefix: bool = True) -> list:
    """``encoded`` rows (``training.batches.encode_rows``) sorted by length and cut into
    ``round(len / micro_batch_rows)`` (at least one) micro-batches of near-equal row counts, each
    padded to its own longest row: ``(input_ids, attention_mask, completion_mask, shared prefix
    length)`` (``training.batches.pad_batch``, :func:`shared_prefix_length`); ``micro_batch_rows`` 0
    gives the one padded batch, unsorted; ``share_prefix`` False: the plain length cut, prefix length
    0 (how training ran before shared prefixes; for measuring).

    When some rows fall into groups that share a long prompt prefix (a role's instruction: the first
    :data:`SHARED_PREFIX_MIN_TOKENS` tokens the same), and cutting each such group on its own and the
    other rows together leaves at most ``1 - PREFIX_GROUPING_MIN_SAVING`` of the positions the plain
    cut runs (each shared prefix counted once, :func:`completion_nll`), that cut is taken instead."""
    parts = [list(encoded)] if micro_batch_rows <= 0 else _length_cut(encoded, micro_batch_rows)
    cut = [(part, shared_prefix_length(part) if share_prefix else 0) for part in parts]
    if micro_batch_rows > 0 and share_prefix:
        cut = _prefix_grouped(encoded, cut, micro_batch_rows)
    return [(*pad_batch(tokenizer, part), prefix) for part, prefix in cut]


def _prefix_grouped(encoded: Sequence, cut: list[tuple[list, int]], micro_batch_rows: int) -> list[tuple[list, int]]:
    """``cut`` ((rows, shared prefix length) per micro-batch), or the rows grouped by their first
    :data:`SHARED_PREFIX_MIN_TOKENS` tokens and each group cut on its own when that runs at most
    ``1 - PREFIX_GROUPING_MIN_SAVING`` of ``cut``'s positions (:func:`micro_batches`)."""
    groups: dict[tuple, list] = {}
    for e in encoded:
        groups.setdefault(tuple(e[0][:SHARED_PREFIX_MIN_TOKENS]), []).append(e)

    def sharing(group: list) -> bool:
        return len(group) > 1 and len(group[0][0]) > SHARED_PREFIX_MIN_TOKENS

    shared = [g for g in groups.values() if sharing(g)]
    if not shared:
        return cut
    rest = [e for g in groups.values() if not sharing(g) for e in g]
    grouped = [(part, shared_prefix_length(part)) for g in shared + ([rest] if rest else [])
               for part in _length_cut(g, micro_batch_rows)]
    return grouped if _positions(grouped) <= (1 - PREFIX_GROUPING_MIN_SAVING) * _positions(cut) else cut


PREFIX_GROUPING_MIN_SAVING = 0.2
"""Share of the positions a prefix-grouped cut must save for :func:`micro_batches` to take it. The
embedded model's batches (where only two labels of one question share a long prefix, now and then)
keep the plain cut and the numerics of its measured campaigns: 600 sampled train_rl and warm-start
batches of a real run were all cut as before. SmolLM2's train_rl batch (14 Solver rows sharing a
52-token instruction, 2 of other roles) runs about half the positions."""


def _length_cut(encoded: Sequence, micro_batch_rows: int) -> list[list]:
    ordered = sorted(encoded, key=lambda e: len(e[0]))
    k = max(1, round(len(ordered) / micro_batch_rows))
    return [ordered[i * len(ordered) // k:(i + 1) * len(ordered) // k] for i in range(k)]


def _positions(parts: list[tuple[list, int]]) -> int:
    return sum(positions_run(len(part), max(len(ids) for ids, _ in part), prefix) for part, prefix in parts)


def prefix_runs_once(prefix_len: int, rows: int) -> bool:
    """Whether :func:`completion_nll` runs a micro-batch's shared prefix of ``prefix_len`` tokens once
    (at least :data:`SHARED_PREFIX_MIN_TOKENS`, and more than one row)."""
    return prefix_len >= SHARED_PREFIX_MIN_TOKENS and rows > 1


def positions_run(rows: int, length: int, prefix_len: int) -> int:
    """Positions the model runs for a micro-batch of ``rows`` padded to ``length`` tokens: ``P + rows
    (length - P)`` when its shared prefix of P = ``prefix_len`` tokens runs once, else ``rows x length``."""
    return prefix_len + rows * (length - prefix_len) if prefix_runs_once(prefix_len, rows) else rows * length


SHARED_PREFIX_MIN_TOKENS = 40
"""Shortest prompt prefix shared by every row of a micro-batch that :func:`sft_backward` runs once
instead of once per row. SmolLM2's Solver rows share 52 tokens (its chat template's system turn and
the Solver's instruction) of ~95; the embedded model's share at most 27, so its training keeps the
plain path and the numerics of its measured campaigns."""


def shared_prefix_length(encoded: Sequence[tuple[list[int], list[int]]]) -> int:
    """How many leading tokens every row of ``encoded`` (``training.batches.encode_rows``) has in
    common, none of them nor the token after them a completion token (their logits carry no loss)
    and each row keeping at least one token of its own; 0 for fewer than two rows."""
    if len(encoded) < 2:
        return 0
    n = common_prefix_length([ids for ids, _ in encoded])
    for _, flags in encoded:
        n = min(n, (flags.index(1) if 1 in flags else len(flags)) - 1)
    return max(0, n)


def completion_nll(model, ids, attn, cmask, prefix_len: int = 0):
    """Summed negative log-likelihood of the completion tokens of one padded micro-batch
    (``input_ids``, ``attention_mask`` [B, T], ``completion_mask`` [B, T-1]: ``pad_batch``).

    With ``prefix_len`` P >= :data:`SHARED_PREFIX_MIN_TOKENS` (the rows' first P tokens are the same
    prompt tokens: :func:`shared_prefix_length`), the prefix runs once at batch 1 with the model's
    key/value cache, the cache is repeated to the B rows and only the T - P remaining positions of
    each row run on top of it. The forward values are the per-row ones (the prefix's hidden states do
    not depend on what follows it) and the backward sums the B rows' gradients through the repeated
    cache into the one prefix pass, so the gradient is the plain forward's (a test compares every
    parameter's), at (P + B (T - P)) / (B T) of the positions. Models that return no
    ``transformers.Cache`` take the plain path."""
    import torch

    if prefix_runs_once(prefix_len, ids.shape[0]):
        from transformers import Cache

        out = model(input_ids=ids[:1, :prefix_len], use_cache=True)
        cache = out["cache"] if "cache" in out else getattr(out, "past_key_values", None)  # ``cache`` since transformers 5
        if isinstance(cache, Cache):
            cache.batch_repeat_interleave(ids.shape[0])
            logits = model(input_ids=ids[:, prefix_len:], attention_mask=attn, cache=cache).logits[:, :-1].float()
            logp = torch.gather(torch.log_softmax(logits, -1), 2, ids[:, prefix_len + 1:, None]).squeeze(-1)
            return -(logp * cmask[:, prefix_len:]).sum()
    return -(token_logprobs(model, ids, attn, 1.0) * cmask).sum()


def sft_backward(model, tokenizer, rows: Sequence[Rollout], max_length: int, precision: str = "float32",
                 micro_batch_rows: int = MICRO_BATCH_ROWS) -> float:
    """Accumulate the gradient of :func:`sft_loss` of ``rows`` (the mean negative log-likelihood of
    all their completion tokens) and return that loss as a float.

    The rows are sorted by token length and run in micro-batches of about ``micro_batch_rows``,
    each padded only to its own longest row; each micro-batch's summed token loss is divided by the
    whole batch's completion-token count, so the gradient is the one padded batch's (the same rows,
    the same weights; only the floating-point summation order differs). A third of a padded batch of
    arith transcripts is padding; sorted micro-batches skip most of it. A prompt prefix every row of
    a micro-batch shares runs once (:func:`completion_nll`)."""
    parts = micro_batches(tokenizer, encode_rows(tokenizer, list(rows), max_length), micro_batch_rows)
    n_tokens = max(1.0, sum(float(cmask.sum()) for _, _, cmask, _ in parts))
    total = 0.0
    for ids, attn, cmask, prefix_len in parts:
        with autocast(precision):
            loss = completion_nll(model, ids, attn, cmask, prefix_len) / n_tokens
        loss.backward()
        total += float(loss.detach())
    return total


def wsd_schedule(optimizer, steps: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float):
    """Warm-up / stable / decay (``transformers.get_wsd_schedule``: linear warm-up, constant rate,
    cosine decay over the last ``decay_steps`` to ``min_lr_ratio`` of the rate). A run that ends in a
    decay leaves the model at a low-loss point (Hägele et al. 2024, "Scaling Laws and Compute-Optimal
    Training Beyond Fixed Training Durations"), which every self-improvement round needs."""
    from transformers import get_wsd_schedule

    warmup = min(warmup_steps, max(0, steps - 1))
    decay = min(decay_steps, max(0, steps - warmup))
    return get_wsd_schedule(optimizer, num_warmup_steps=warmup, num_decay_steps=decay, num_training_steps=steps,
                            min_lr_ratio=min_lr_ratio)


def resolve_precision(precision: str) -> str:
    """``model.train_precision`` as the loop runs it: ``auto`` is ``bfloat16`` on a CPU with native
    bfloat16 matmuls (``runtime_env.native_bfloat16``) and ``float32`` elsewhere; ``float32`` and
    ``bfloat16`` are taken as given. Raises ``ValueError`` for anything else."""
    if precision == "auto":
        from selfevolve.runtime_env import native_bfloat16

        return "bfloat16" if native_bfloat16() else "float32"
    if precision not in ("float32", "bfloat16"):
        raise ValueError(f"train_precision must be auto, float32 or bfloat16, got {precision!r}")
    return precision


def autocast(precision: str):
    """``torch.autocast`` to bfloat16 on the CPU when ``precision`` resolves to ``bfloat16``
    (:func:`resolve_precision`; matmuls in bfloat16, weights and optimizer state in float32:
    measured 1.4-1.7x faster per step on 2 cores with AMX), a no-op context otherwise or on a GPU
    (where the model's own dtype decides)."""
    import torch

    if resolve_precision(precision) == "bfloat16" and not torch.cuda.is_available():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def fit(model, tokenizer, draw: Callable[[random.Random], list[Rollout]], *, steps: int, learning_rate: float,
        warmup_steps: int, decay_steps: int, min_lr_ratio: float, max_length: int, seed: int = 0, precision: str = "float32",
        max_grad_norm: float = 1.0, desc: str = "train", on_step: Callable[[int, dict], None] | None = None,
        micro_batch_rows: int = MICRO_BATCH_ROWS) -> list[dict]:
    """``steps`` updates of AdamW on :func:`sft_loss` of the batches ``draw(rng)`` returns (computed
    in length-sorted micro-batches of about ``micro_batch_rows``: :func:`sft_backward`), on a
    :func:`wsd_schedule`. Returns the loss curve (``{step, loss, lr}`` per step); ``on_step`` gets
    each entry as it happens."""
    import torch
    from tqdm import tqdm

    rng = random.Random(seed)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=0.0)
    schedule = wsd_schedule(opt, steps, warmup_steps, decay_steps, min_lr_ratio)
    curve = []
    for step in tqdm(range(1, steps + 1), desc=desc, unit="step"):
        opt.zero_grad()
        loss = sft_backward(model, tokenizer, draw(rng), max_length, precision, micro_batch_rows)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()
        schedule.step()
        rec = {"step": step, "loss": loss, "lr": schedule.get_last_lr()[0]}
        curve.append(rec)
        if on_step:
            on_step(step, rec)
    model.eval()
    return curve


def chat_rows(chats: Sequence[list[dict[str, str]]], prefix: str = "t") -> list[Rollout]:
    """Single-turn chats (``[user, assistant]``) as training rows; the role is read from the user
    turn's template only for bookkeeping (``role`` ``solver`` for all but what the caller sets)."""
    rows = []
    for i, chat in enumerate(chats):
        if len(chat) != 2 or chat[0]["role"] != "user" or chat[1]["role"] != "assistant":
            raise ValueError(f"chat {i} is not one user turn and one assistant turn")
        rows.append(Rollout(id=f"{prefix}{i}", role="solver", group=f"{prefix}{i}", question_id="", prompt=chat[0]["content"],
                            completion=chat[1]["content"], reward=1.0))
    return rows
