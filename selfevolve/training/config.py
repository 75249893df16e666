"""The configuration the policy trainers take (one type, as TRL hands each trainer its own config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from selfevolve.config import LoraParams, Params, RLParams, SageParams, VerifierParams


class TrainConfig(BaseModel):
    """What the policy trainers read (``rl.train_reinforce_pp``, ``rl.train_grpo``,
    ``expert_iteration.train_expert_iteration``), and nothing else; built from a campaign's
    ``Params`` by :meth:`from_params` (no field has a default of its own: the params schema is the
    one place defaults live).

    ``rl``: steps, batch, learning rate, schedule, checkpoint selection (``config.RLParams``);
    ``lora``: adapters or full fine-tuning; ``seed``: data order and initialisation;
    ``max_model_len``: tokens per training sequence (prompts are cut from the left);
    ``train_precision``: matmul precision on the CPU; ``temperature``: the rollouts' sampling
    temperature (behaviour log-probs are of ``softmax(logits / T)``; GRPO samples at it);
    ``max_new_tokens``: GRPO's completion length; ``sage``: the Solver reward's weights (GRPO);
    ``verifiers``: the grader GRPO rewards with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rl: RLParams
    lora: LoraParams
    seed: int
    max_model_len: int
    train_precision: Literal["auto", "float32", "bfloat16"]
    temperature: float
    max_new_tokens: int
    sage: SageParams
    verifiers: VerifierParams

    @classmethod
    def from_params(cls, params: Params) -> "TrainConfig":
        """``rl``, ``model.lora`` / ``max_model_len`` / ``train_precision``, ``seed``,
        ``sampling.temperature`` / ``max_new_tokens``, ``sage`` and ``verifiers`` of a campaign."""
        m = params.model
        return cls(rl=params.rl, lora=m.lora, seed=params.seed, max_model_len=m.max_model_len,
                   train_precision=m.train_precision, temperature=params.sampling.temperature,
                   max_new_tokens=params.sampling.max_new_tokens, sage=params.sage, verifiers=params.verifiers)
