"""OpenAI-compatible HTTP backend: any server speaking ``POST /v1/chat/completions``.

Works with ``selfevolve serve``, ``vllm serve``, llama.cpp, TGI and hosted APIs, through the
``openai`` package. Each conversation is one request (with ``n`` samples); requests run on a thread
pool of ``max_concurrency`` workers, so at most that many are in flight at once.

Retries: a request that fails with a connection error, a timeout, HTTP 408/409/429 or any 5xx is
retried up to ``max_retries`` times with exponential backoff and jitter
(``delay = min(backoff_max_s, backoff_base_s * 2**attempt)``, then a uniform draw in
``[delay/2, delay]``; a ``Retry-After`` header, capped at ``backoff_max_s``, wins when larger).
Other errors (400, 401, 404, ...) are not retried.

Failures do not kill a batch: a conversation whose request still fails after the retries gets
``sampling.n`` completions ``Completion(text="", finish_reason="error")`` and a warning is logged;
every other conversation is returned normally. Callers that need all answers check
``finish_reason == "error"``.

``n`` samples: the request asks for ``n`` choices. A server that ignores ``n`` (returns fewer
choices) is asked again for the rest; a server that rejects ``n > 1`` with HTTP 400/422 is asked one
sample at a time from then on. With a ``seed``, follow-up requests use ``seed + k`` (k = request
number within the conversation) so repeated samples differ and the whole call stays reproducible
on servers that honour seeds.

Token counts come from ``usage``: ``prompt_tokens`` as reported; ``usage.completion_tokens`` covers
all choices of a request, so with several choices per request it is split across them in
proportion to their text length (exact with one choice per request; 0 when the server sends no
``usage``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


@dataclass
class RequestStats:
    """Counters of the last ``chat`` call: HTTP requests sent, retries, conversations that ended
    in ``finish_reason="error"``, and the most requests in flight at once."""

    requests: int = 0
    retries: int = 0
    failed_prompts: int = 0
    max_in_flight: int = 0
    seconds: float = 0.0


def is_retryable(exc: BaseException) -> bool:
    """True for errors worth retrying: connection errors, timeouts, HTTP 408/409/425/429 and 5xx."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
    return False


def backoff_delay(attempt: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): exponential with "equal jitter",
    uniform in ``[d/2, d]`` where ``d = min(max_s, base_s * 2**attempt)``."""
    d = min(max_s, base_s * (2 ** attempt))
    r = (rng or random).random()
    return d / 2 + r * d / 2


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def split_tokens(total: int, texts: list[str]) -> list[int]:
    """Split ``total`` completion tokens over choices in proportion to their text lengths
    (largest remainders; the parts sum to ``total``; equal parts when every text is empty)."""
    if not texts:
        return []
    weights = [len(t) for t in texts]
    if sum(weights) == 0:
        weights = [1] * len(texts)
    raw = [total * w / sum(weights) for w in weights]
    parts = [int(x) for x in raw]
    rest = total - sum(parts)
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - parts[i], reverse=True)[:rest]:
        parts[i] += 1
    return parts


class OpenAIBackend(Backend):
    """Chat completions from an OpenAI-compatible server.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the server expects.
        api_key: sent as a bearer token; ``None`` sends the placeholder ``"EMPTY"`` (local servers
            ignore it).
        timeout_s: per-request timeout in seconds.
        max_retries: retries per request after the first attempt (see module docstring).
        max_concurrency: most requests in flight at once (thread pool size).
        backoff_base_s, backoff_max_s: backoff schedule in seconds.
        extra_body: extra JSON fields sent with every request (e.g. ``{"top_k": -1}`` for vLLM).
    """

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, max_concurrency: int = 8, backoff_base_s: float = 0.5,
                 backoff_max_s: float = 30.0, extra_body: dict[str, Any] | None = None):
        import openai

        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = base_url
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_body = dict(extra_body or {})
        # retries are ours (logged, counted, with jitter), so the client's own are off
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=self.timeout_s)
        self._n_supported = True
        self._lock = threading.Lock()
        self._in_flight = 0
        self._rng = random.Random()
        self.last_stats = RequestStats()

    # ------------------------------------------------------------------ one request
    def _create(self, conversation: Messages, sampling: SamplingConfig, n: int, seed: int | None, stats: RequestStats):
        """One request with retries. Returns the parsed response; raises the last error."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": conversation,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
            "n": n,
        }
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if seed is not None:
            kwargs["seed"] = seed
        extra = dict(self.extra_body)
        if conversation and conversation[-1].get("role") == "assistant":
            # a reply to continue (answer forcing): vLLM's server and `selfevolve serve` honour these fields
            extra.update({"continue_final_message": True, "add_generation_prompt": False})
        if extra:
            kwargs["extra_body"] = extra
        attempt = 0
        while True:
            with self._lock:
                stats.requests += 1
                self._in_flight += 1
                stats.max_in_flight = max(stats.max_in_flight, self._in_flight)
            try:
                return self.client.chat.completions.create(**kwargs)
            except Exception as exc:  # noqa: BLE001 - classified below
                if not is_retryable(exc) or attempt >= self.max_retries:
                    raise
                delay = backoff_delay(attempt, self.backoff_base_s, self.backoff_max_s, self._rng)
                after = _retry_after(exc)
                if after is not None:
                    delay = max(delay, min(after, self.backoff_max_s))
                logger.info("request to %s failed (%s: %s); retry %d/%d in %.2fs", self.base_url,
                            type(exc).__name__, str(exc)[:200], attempt + 1, self.max_retries, delay)
                with self._lock:
                    stats.retries += 1
            finally:
                with self._lock:
                    self._in_flight -= 1
            time.sleep(delay)
            attempt += 1

    def _complete(self, index: int, conversation: Messages, sampling: SamplingConfig, stats: RequestStats) -> list[Completion]:
        """All ``sampling.n`` completions of one conversation (error completions on failure)."""
        import openai

        got: list[Completion] = []
        k = 0
        empty_replies = 0
        while len(got) < sampling.n:
            want = sampling.n - len(got) if self._n_supported else 1
            seed = None if sampling.seed is None else sampling.seed + k
            k += 1
            try:
                resp = self._create(conversation, sampling, want, seed, stats)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if want > 1:  # (another thread may have switched already: retry with n=1 either way)
                    logger.info("server rejected n=%d (%s); asking for one sample per request from now on", want, str(exc)[:200])
                    self._n_supported = False
                    continue
                return got + self._errors(index, sampling.n - len(got), exc, stats)
            except Exception as exc:  # noqa: BLE001 - one prompt's failure must not kill the batch
                return got + self._errors(index, sampling.n - len(got), exc, stats)
            choices = sorted(resp.choices or [], key=lambda c: c.index)[:want]
            if not choices:
                empty_replies += 1
                if empty_replies > 2:
                    return got + self._errors(index, sampling.n - len(got), RuntimeError("server returned no choices"), stats)
                continue
            texts = [(c.message.content if c.message is not None else None) or "" for c in choices]
            usage = getattr(resp, "usage", None)
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            outs = split_tokens(int(getattr(usage, "completion_tokens", 0) or 0), texts)
            for c, text, n_out in zip(choices, texts, outs):
                got.append(Completion(text=text, prompt_tokens=prompt_tokens, output_tokens=n_out,
                                      finish_reason="length" if c.finish_reason == "length" else "stop"))
        return got

    def _errors(self, index: int, count: int, exc: BaseException, stats: RequestStats) -> list[Completion]:
        logger.warning("conversation %d failed after retries (%s: %s); returning %d error completion(s)",
                       index, type(exc).__name__, str(exc)[:300], count)
        with self._lock:
            stats.failed_prompts += 1
        return [Completion(text="", finish_reason="error") for _ in range(count)]

    # ------------------------------------------------------------------ batch
    def chat(self, conversations: list[Messages], sampling: SamplingConfig) -> list[list[Completion]]:
        """B conversations → B lists of ``sampling.n`` completions, at most ``max_concurrency``
        requests in flight. Never raises for a failing request (see module docstring)."""
        t0 = time.time()
        stats = RequestStats()
        if not conversations:
            self.last_stats = stats
            return []
        workers = min(self.max_concurrency, len(conversations))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-backend") as pool:
            futures = [pool.submit(self._complete, i, c, sampling, stats) for i, c in enumerate(conversations)]
            results = [f.result() for f in futures]
        stats.seconds = time.time() - t0
        self.last_stats = stats
        logger.info("openai backend: %d conversations, %d requests, %d retries, %d failed, %.2fs",
                    len(conversations), stats.requests, stats.retries, stats.failed_prompts, stats.seconds)
        return results

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
