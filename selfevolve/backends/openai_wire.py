"""OpenAI API wire format for ``selfevolve serve``: the request bodies it honours (pydantic
models; unknown fields are ignored), ``usage`` and server-sent events (see
``selfevolve.backends.serve`` for the endpoints and the stream's order)."""

from __future__ import annotations

import json
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from selfevolve.backends.base import Completion, SamplingConfig


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str = "text"
    text: str = ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if p.type == "text")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Request fields shared by both endpoints."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=256)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None

    def sampling(self, max_new_tokens: int) -> SamplingConfig:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, n=self.n, seed=self.seed,
                              stop=[s for s in stop if s], max_new_tokens=max_new_tokens)


class ChatCompletionRequest(SamplingFields):
    """The subset of OpenAI's chat completion request this server honours."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class CompletionRequest(SamplingFields):
    """The subset of OpenAI's (legacy) text completion request this server honours."""

    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    max_tokens: int = Field(16, ge=0)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=5)

    def prompts(self) -> list[str] | list[list[int]]:
        """The B prompts: texts, or token-id lists (one list of ints is one prompt)."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if all(isinstance(p, int) for p in self.prompt):
            return [list(self.prompt)]  # type: ignore[arg-type]
        return list(self.prompt)  # type: ignore[arg-type]


def usage(results: list[list[Completion]]) -> dict[str, int]:
    """OpenAI's ``usage`` for B prompts' completions: each prompt counted once, every sample's output."""
    prompt = sum(comps[0].prompt_tokens for comps in results if comps)
    completion = sum(c.output_tokens for comps in results for c in comps)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def sse(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event carrying ``payload`` (JSON, or a literal string such as ``[DONE]``)."""
    from fastapi.sse import format_sse_event

    return format_sse_event(data_str=payload if isinstance(payload, str) else json.dumps(payload))


#: ``chunk(choice_index, text, finish_reason)``: one streamed chunk of an endpoint's object.
ChunkMaker = Callable[[int, str | None, str | None], dict[str, Any]]
