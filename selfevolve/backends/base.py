"""One interface for every LLM backend: batched chat completion.

Roles, MASS and evaluation call ``Backend.chat(conversations, sampling)`` and never know which
implementation serves them (``hf`` transformers, ``vllm`` offline engine, ``openai`` HTTP).

Shapes: ``conversations`` is a list of B message lists (``[{"role": ..., "content": ...}, ...]``);
the result is a list of B lists of ``sampling.n`` ``Completion`` objects (outer index = prompt,
inner index = sample).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

Messages = list[dict[str, str]]

#: ``on_text(prompt_index, sample_index, delta)``: text generated so far for one completion, handed
#: out in pieces while generation runs (see ``Backend.streams``).
TextCallback = Callable[[int, int, str], None]


class SamplingConfig(BaseModel):
    """Sampling parameters for one batched request.

    ``temperature`` 0 means greedy; ``n`` samples per prompt; ``seed`` makes sampling
    reproducible where the backend supports it; generation stops at EOS, ``max_new_tokens`` or
    the first of ``stop`` (the stop string is not included in the text).
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(128, ge=1)
    n: int = Field(1, ge=1)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)


class Completion(BaseModel):
    """One generated completion: text, token counts and why generation stopped
    (``stop``: EOS or a stop string; ``length``: hit ``max_new_tokens``; ``error``: the backend failed
    for this prompt after retries, ``text`` empty)."""

    text: str
    prompt_tokens: int = 0
    output_tokens: int = 0
    finish_reason: Literal["stop", "length", "error"] = "stop"
    #: the generated ids that decode to ``text`` (EOS excluded), where the backend knows them and no
    #: stop string cut a token; None otherwise
    token_ids: list[int] | None = None


class TokenLogprobs(BaseModel):
    """Per-token log-probabilities of one scored text (OpenAI's ``logprobs`` object of a legacy
    completion choice): aligned lists over its T tokens. ``token_logprobs[i]`` is the natural-log
    probability of token i given tokens 0..i-1 (``None`` for the first token, which has no context);
    ``top_logprobs[i]`` the most likely tokens at position i with theirs (``None`` at i = 0);
    ``text_offset[i]`` the character offset of token i in the concatenated ``tokens``.
    ``prompt_tokens`` says how many leading tokens are the prompt's."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]
    prompt_tokens: int

    @classmethod
    def of(cls, tokens: list[str], logprobs: list[float], tops: list[list[tuple[str, float]]] | None,
           prompt_tokens: int) -> "TokenLogprobs":
        """From T token strings, the T - 1 log-probabilities of tokens 1..T-1 and, per position 1..T-1,
        the most likely ``(token, logprob)`` pairs, likeliest first (None: no top lists). Tokens that
        print alike share a key in ``top_logprobs``: the likelier one's."""
        top: list[dict[str, float] | None] = [None] * len(tokens)
        for j, pairs in enumerate(tops or [], start=1):
            top[j] = {}
            for text, value in pairs:
                top[j].setdefault(text, value)
        offsets = [0]
        for t in tokens[:-1]:
            offsets.append(offsets[-1] + len(t))
        return cls(tokens=tokens, token_logprobs=[None, *logprobs], top_logprobs=top, text_offset=offsets[:len(tokens)],
                   prompt_tokens=prompt_tokens)

    def tail(self, start: int) -> "TokenLogprobs":
        """The same object for tokens ``start..T-1`` (offsets re-based to the first of them)."""
        base = self.text_offset[start] if start < len(self.text_offset) else 0
        return TokenLogprobs(tokens=self.tokens[start:], token_logprobs=self.token_logprobs[start:],
                             top_logprobs=self.top_logprobs[start:], text_offset=[o - base for o in self.text_offset[start:]],
                             prompt_tokens=max(0, self.prompt_tokens - start))


class Backend(ABC):
    """Batched chat completion. Implementations must return, for every conversation,
    exactly ``sampling.n`` completions, in input order.

    A backend with ``streams = True`` also accepts ``on_text`` (a ``TextCallback``) in ``chat`` and
    ``complete``: it is called from the generating thread with pieces of each completion's text as
    they are generated; the pieces of one completion join to a prefix of its final ``text`` (text
    that a stop string or a later token may still change is held back), and the caller takes the
    rest from the returned ``Completion``.
    """

    name: str = "base"
    streams: bool = False
    token_prompts: bool = False

    @abstractmethod
    def chat(self, conversations: list[Messages], sampling: SamplingConfig) -> list[list[Completion]]:
        ...

    def complete(self, prompts: list[str], sampling: SamplingConfig) -> list[list[Completion]]:
        """``sampling.n`` continuations of each of the B raw text prompts (no chat template), as B
        lists of ``Completion``. A backend that reads token ids (``token_prompts = True``) also takes
        a prompt as a list of token ids. Raises ``NotImplementedError`` in backends without raw
        prompts."""
        raise NotImplementedError(f"the {self.name} backend does not continue raw text prompts")

    def score(self, prompts: list[str] | list[list[int]], continuations: list[str] | list[list[int]],
              top: int = 1) -> list[TokenLogprobs]:
        """Log-probabilities of every token of ``prompt + continuation`` for each of the B pairs, as
        B ``TokenLogprobs`` (a text is tokenised as ``complete`` does, the prompt with the
        tokenizer's special tokens, the continuation without; token ids are taken as they are), with the
        ``top`` most likely tokens per position (0: none). Raises ``NotImplementedError`` in
        backends that cannot score text."""
        raise NotImplementedError(f"the {self.name} backend does not score text (no logprobs)")

    def close(self) -> None:  # pragma: no cover - default no-op
        """Release resources (engines, HTTP clients)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
