"""The embedded default model: a tokenizer trained locally and a small Llama built from a config.

Nothing here touches a model hub. ``build_tokenizer`` trains a byte-level BPE with ``tokenizers``
(digits split one per token, so arithmetic is learnable), adds the chat markers as special tokens
and the role tags (``<question>``, ``<answer>``, ...) as *normal* tokens (TRL decodes completions
with ``skip_special_tokens=True``; special-token tags would vanish and every format reward be 0).
``build_model`` makes a ``LlamaForCausalLM`` from a ``LlamaConfig`` (a Llama config, not Qwen2:
``AutoTokenizer`` would swap a Qwen2 config's trained tokenizer for Qwen2's own class).

The result loads with ``AutoModelForCausalLM.from_pretrained(path)`` and
``AutoTokenizer.from_pretrained(path)`` like any Hugging Face model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|eos|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|eos|>' }}{% endif %}"
    "{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
# Tags the roles emit: normal tokens so that decoding with skip_special_tokens keeps them.
TAG_TOKENS = [
    f"<{t}>" for t in ("question", "answer", "tests", "plan", "score", "think", "code", "agent", "design")
] + [f"</{t}>" for t in ("question", "answer", "tests", "plan", "score", "think", "code", "agent", "design")]


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 384):
    """Train a byte-level BPE tokenizer on ``corpus`` and wrap it as a ``PreTrainedTokenizerFast``.

    Args:
        corpus: texts (transcripts) to learn merges from.
        vocab_size: target vocabulary size including the 256 byte symbols and special tokens.

    Returns a ``PreTrainedTokenizerFast`` with pad/bos/eos set, left padding (batched generation)
    and a chat template (``<|role|>\\n content <|eos|>\\n``; assistant turns wrapped in
    ``{% generation %}`` so TRL can build assistant-only loss masks). Decoding is the exact
    inverse of encoding for any text (byte-level).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(TAG_TOKENS, special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


#: Linear RoPE scaling by this factor makes every rotary frequency ~1e-30: no position encoding
#: (NoPE), written as a standard Llama config that any Llama runtime loads.
NOPE_FACTOR = 1e30


def build_model(tokenizer, hidden_size: int = 128, num_layers: int = 4, num_heads: int = 4,
                intermediate_size: int = 384, max_position_embeddings: int = 512, seed: int = 0,
                position_encoding: str = "rope"):
    """A freshly initialised ``LlamaForCausalLM`` sized for CPU training.

    ``position_encoding``: ``rope`` (Llama's rotary embedding, theta 10,000) or ``none`` (NoPE: the
    causal mask is the only source of order; Kazemnejad et al. 2023, "The Impact of Positional
    Encoding on Length Generalization in Transformers"; Lee et al. 2025 train their
    self-improving adder this way), spelled as linear RoPE scaling by ``NOPE_FACTOR`` so the saved
    ``config.json`` is a plain Llama one. Parameter count for the defaults with a ~400-token
    vocabulary: about 0.9 M. Deterministic for a given ``seed``. Raises ``ValueError`` for another
    ``position_encoding``.
    """
    if position_encoding not in ("rope", "none"):
        raise ValueError(f"position_encoding must be 'rope' or 'none', got {position_encoding!r}")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0} if position_encoding == "rope" else
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": NOPE_FACTOR},
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def save_untrained(path: str | Path, corpus: Iterable[str], vocab_size: int = 384, seed: int = 0, **model_kwargs) -> Path:
    """Build tokenizer + untrained model and ``save_pretrained`` both to ``path`` (for tests and the
    first step of ``bootstrap``). Returns ``path``."""
    path = Path(path)
    tok = build_tokenizer(corpus, vocab_size=vocab_size)
    model = build_model(tok, seed=seed, **model_kwargs)
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(path)
    model.save_pretrained(path)
    return path
