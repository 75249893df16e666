"""Training batches: role rows (prompt, completion) tokenised through the model's chat template,
padded, with the completion-token mask every loss here uses, and the policy's per-token
log-probabilities of them."""

from __future__ import annotations

from typing import Sequence

from selfevolve.records import Rollout


def encode_rows(tokenizer, rows: list[Rollout], max_length: int) -> list[tuple[list[int], list[int]]]:
    """Each row as (token ids, completion flags): the prompt through the chat template with the
    generation prompt, then the completion and EOS, truncated to ``max_length`` from the left of the
    prompt if needed; the flag is 1 on completion tokens."""
    encoded = []
    for r in rows:
        p = tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}], add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"]
        c = tokenizer(r.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (p + c)[-max_length:]
        n_c = min(len(c), len(ids) - 1)
        encoded.append((ids, [0] * (len(ids) - n_c) + [1] * n_c))
    return encoded


def pad_batch(tokenizer, encoded: Sequence[tuple[list[int], list[int]]]):
    """:func:`encode_rows` output right-padded to its longest row: ``input_ids`` [B, T],
    ``attention_mask`` [B, T], ``completion_mask`` [B, T-1] (1 on the positions whose *next* token
    is a completion token)."""
    import torch

    T = max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((len(encoded), T), tokenizer.pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(encoded), T), dtype=torch.long)
    cmask = torch.zeros((len(encoded), T), dtype=torch.float)
    for i, (ids, flags) in enumerate(encoded):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        attn[i, :len(ids)] = 1
        cmask[i, :len(ids)] = torch.tensor(flags, dtype=torch.float)
    return input_ids, attn, cmask[:, 1:]


def build_batch(tokenizer, rows: list[Rollout], max_length: int):
    """Tokenise (prompt via chat template with the generation prompt) + completion + EOS.

    Returns ``input_ids`` [B, T], ``attention_mask`` [B, T], ``completion_mask`` [B, T-1] (1 on
    the positions whose *next* token is a completion token), right-padded, truncated to
    ``max_length`` from the left of the prompt if needed (:func:`encode_rows`, :func:`pad_batch`).
    """
    return pad_batch(tokenizer, encode_rows(tokenizer, rows, max_length))


def token_logprobs(model, input_ids, attention_mask, temperature: float = 1.0):
    """Log-probability of each next token under the policy sampled at ``temperature``
    (``softmax(logits / temperature)``, as the rollouts were drawn; 0 or 1 = the raw logits): [B, T-1]."""
    import torch

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    return torch.gather(torch.log_softmax(logits, -1), 2, input_ids[:, 1:, None]).squeeze(-1)
