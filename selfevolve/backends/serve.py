"""An OpenAI-compatible HTTP server over a local backend (``selfevolve serve MODEL_PATH``).

Endpoints (FastAPI, served by uvicorn, bound to 127.0.0.1 by default):

- ``POST /v1/chat/completions``: OpenAI chat schema. Request fields used: ``model``, ``messages``
  (``content`` a string or a list of ``{"type": "text", "text": ...}`` parts), ``temperature``
  (default 1), ``top_p`` (default 1), ``max_tokens`` / ``max_completion_tokens`` (default
  ``default_max_tokens``), ``n`` (default 1), ``stop`` (string or list), ``seed``, ``stream``,
  ``stream_options.include_usage``. Unknown fields are ignored. Response: ``id``,
  ``object: "chat.completion"``, ``created``, ``model``,
  ``choices[{index, message{role, content}, finish_reason}]``,
  ``usage{prompt_tokens, completion_tokens, total_tokens}`` (``completion_tokens`` summed over the
  ``n`` choices).
- ``POST /v1/completions``: OpenAI's legacy text completion on raw prompts (no chat template).
  Fields: ``model``, ``prompt`` (a string, a list of strings, a list of token ids or a list of
  such lists; token ids need a backend that reads them, the ``hf`` one), ``max_tokens`` (default
  16, as OpenAI's; 0 with ``echo`` scores the prompt without generating), ``temperature``,
  ``top_p``, ``n``, ``stop``, ``seed``, ``echo`` (the prompt is put before each text),
  ``logprobs`` (0-5), ``stream``, ``stream_options.include_usage``. Response: ``object:
  "text_completion"``, ``choices[{index, text, finish_reason, logprobs}]`` with choice
  ``index = prompt_index * n + sample_index``, and ``usage`` summed over the prompts. With
  ``logprobs`` set, each choice's ``logprobs`` is OpenAI's ``{tokens, token_logprobs,
  top_logprobs, text_offset}`` over the generated tokens (over prompt and generated tokens with
  ``echo``; the first prompt token's entries are null), from one scoring pass of the model over
  the prompt and the generated tokens (``Backend.score``; where a stop string cut a token, the
  returned text as the tokenizer splits it) with the ``logprobs`` most likely
  tokens per position. This is what log-likelihood evaluations (lm-evaluation-harness'
  ``local-completions`` with a tokenizer: multiple-choice tasks, perplexity) ask for; ``logprobs``
  cannot be streamed (400), and is ``null`` without it.
- ``GET /v1/models``: the one served model.
- ``GET /health``: ``{"status": "ok", "model": ...}``.

Streaming (``stream: true``) answers ``text/event-stream`` as OpenAI does: one ``data: {chunk}``
event per piece of text (``chat.completion.chunk`` objects whose ``choices[i].delta`` holds
``role`` in the first chunk of each choice, then ``content`` pieces; for ``/v1/completions``
``text_completion`` objects with ``choices[i].text``), a chunk with each choice's
``finish_reason``, a chunk with empty ``choices`` and the ``usage`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``. A backend that streams
(``Backend.streams``, the ``hf`` backend) hands out text while it generates; with another backend
each choice arrives in one piece when it is done. A failure after the stream has begun is sent as a
``data: {"error": {...}}`` event before ``[DONE]``. The pieces of a choice always join to the text
the same request without ``stream`` returns.

Errors use OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400 for an invalid
request, 404 for another model name, 500 when generation fails, 501 when the backend cannot
continue raw prompts (``/v1/completions`` on a backend without ``complete``).

Request limits, checked before anything is queued for generation, so that one client cannot stall the
others: a body over ``max_body_bytes`` (default 2 MiB) is refused with 413 from its
``Content-Length`` before it is read (a POST without one gets 411), and a prompt whose token count
(templated for chat; as tokenised for a raw prompt) leaves no room to generate within the backend's
``max_model_len`` gets 400 "prompt exceeds the context" (counted with a private copy of the
backend's tokenizer, off the event loop).

Generation runs in ONE worker thread (the backend is not shared between threads; the HF backend
also holds its own lock). Requests that arrive while the worker is busy are queued, and queued
requests of one kind (chat or raw completion) with identical sampling parameters are generated
together in one batched call (up to ``max_batch_prompts`` prompts), which is what makes a
concurrent client fast on a CPU. Seeded sampling requests (``seed`` set and ``temperature > 0``)
and streamed requests always run alone, so their output does not depend on what else was queued.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Literal

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig, TextCallback
from selfevolve.backends.openai_wire import ChatCompletionRequest, ChunkMaker, CompletionRequest, SamplingFields, sse, usage

logger = logging.getLogger(__name__)


Kind = Literal["chat", "complete", "score"]


@dataclass
class _Job:
    inputs: list[Messages] | list[str]
    sampling: SamplingConfig
    kind: Kind = "chat"
    on_text: TextCallback | None = None
    top: int = 0
    future: Future = field(default_factory=Future)


class GenerationWorker:
    """One thread that owns the backend and runs queued jobs, batching compatible ones.

    ``submit(inputs, sampling, kind, on_text)`` returns a ``concurrent.futures.Future`` resolving
    to ``backend.chat(inputs, sampling)`` (``kind="chat"``, B conversations) or
    ``backend.complete(inputs, sampling)`` (``kind="complete"``, B raw prompts): B lists of
    ``sampling.n`` completions, or the call's exception; ``kind="score"`` (B ``(prompt,
    continuation)`` pairs, run alone) resolves to ``backend.score(prompts, continuations, top)``.
    With ``on_text`` the job runs alone and, when the backend streams, ``on_text`` is passed to it
    (called from the worker thread).
    """

    def __init__(self, backend: Backend, max_batch_prompts: int = 64):
        self.backend = backend
        self.max_batch_prompts = max(1, int(max_batch_prompts))
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._stopped = False
        self._pending: deque[_Job | None] = deque()  # taken off the queue, not yet run (worker thread only)
        self._thread = threading.Thread(target=self._run, name="generation-worker", daemon=True)
        self._thread.start()
        self.batches_run = 0

    @staticmethod
    def _batchable(job: _Job) -> bool:
        return job.kind != "score" and job.on_text is None and (job.sampling.temperature == 0 or job.sampling.seed is None)

    def submit(self, inputs: list, sampling: SamplingConfig, kind: Kind = "chat",
               on_text: TextCallback | None = None, top: int = 0) -> Future:
        """Queue one job (see the class docstring); raises ``RuntimeError`` once stopped."""
        if self._stopped:
            raise RuntimeError("generation worker is stopped")
        job = _Job(inputs, sampling, kind, on_text, top=top)
        self._queue.put(job)
        return job.future

    def _take_compatible(self, first: _Job) -> list[_Job]:
        """``first`` plus every waiting batchable job of its kind with the same sampling parameters
        (in arrival order, up to ``max_batch_prompts`` prompts); the others keep their place in line."""
        jobs = [first]
        if not self._batchable(first):
            return jobs
        while True:
            try:
                self._pending.append(self._queue.get_nowait())
            except queue.Empty:
                break
        size = len(first.inputs)
        keep: deque[_Job | None] = deque()
        while self._pending:
            job = self._pending.popleft()
            if (job is not None and self._batchable(job) and job.kind == first.kind and job.sampling == first.sampling
                    and size + len(job.inputs) <= self.max_batch_prompts):
                jobs.append(job)
                size += len(job.inputs)
            else:
                keep.append(job)
        self._pending = keep
        return jobs

    def _run(self) -> None:
        while True:
            first = self._pending.popleft() if self._pending else self._queue.get()
            if first is None:
                return
            jobs = self._take_compatible(first)
            convs = [c for j in jobs for c in j.inputs]
            call = {"chat": self.backend.chat, "complete": self.backend.complete,
                    "score": lambda pairs, _: self.backend.score([p for p, _ in pairs], [c for _, c in pairs], top=first.top),
                    }[first.kind]
            extra = {"on_text": first.on_text} if first.on_text is not None and self.backend.streams else {}
            t0 = time.time()
            try:
                with self._lock:
                    results = call(convs, first.sampling, **extra)
            except BaseException as exc:  # noqa: BLE001 - delivered to every waiting request
                logger.exception("generation failed for %d conversation(s)", len(convs))
                for j in jobs:
                    j.future.set_exception(exc)
                continue
            self.batches_run += 1
            logger.info("served %d request(s), %d conversation(s) in one batch: %.2fs", len(jobs), len(convs), time.time() - t0)
            k = 0
            for j in jobs:
                j.future.set_result(results[k:k + len(j.inputs)])
                k += len(j.inputs)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Finish the queued jobs, then end the thread."""
        if not self._stopped:
            self._stopped = True
            self._queue.put(None)
            self._thread.join(timeout)


def _error(status: int, message: str, typ: str = "invalid_request_error", param: str | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": {"message": message, "type": typ, "param": param, "code": status}})


def _same_model(requested: str, served: str, model_path: str | None) -> bool:
    if requested in (served, model_path):
        return True
    if model_path:
        try:
            return Path(requested).resolve() == Path(model_path).resolve()
        except (OSError, ValueError):
            return False
    return False


#: Largest request body accepted, in bytes.
MAX_BODY_BYTES = 2 << 20


class PromptCounter:
    """Token count of a templated prompt with a private copy of ``backend``'s tokenizer (the
    backend's own is in use by the generation thread), one count at a time. ``limit`` is the
    backend's ``max_model_len``; both are None for a backend without them (no check)."""

    def __init__(self, backend: Backend):
        tok = getattr(backend, "tokenizer", None)
        self.limit: int | None = getattr(backend, "max_model_len", None) if tok is not None else None
        self._tok = copy.deepcopy(tok) if tok is not None else None
        self.vocab: int | None = len(tok) if tok is not None else None
        self._lock = threading.Lock()

    def decode(self, ids: list[int]) -> str:
        """The text of a token-id prompt (special tokens kept), or "" without a tokenizer."""
        if self._tok is None:
            return ""
        with self._lock:
            return self._tok.decode(ids)

    def count(self, prompt: Messages | str | list[int]) -> int | None:
        """Tokens of a prompt as the backend runs it: a conversation rendered with the chat template
        (generation prompt, no extra special tokens), a raw string tokenised as it is (the
        tokenizer's special tokens added). None without a tokenizer."""
        if self._tok is None:
            return None
        from selfevolve.backends.hf import render_prompt

        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return len(prompt)
        with self._lock:
            if isinstance(prompt, str):
                return len(self._tok(prompt)["input_ids"])
            return len(self._tok(render_prompt(self._tok, prompt), add_special_tokens=False)["input_ids"])

    async def refusal(self, prompts: list[Messages] | list[str], param: str):
        """The 400 response for the first of ``prompts`` with no room left in the context, or None."""
        if self.limit is None:
            return None
        for prompt in prompts:
            tokens = await asyncio.to_thread(self.count, prompt)
            if tokens is not None and tokens >= self.limit:
                return _error(400, f"prompt exceeds the context: {tokens} tokens, the model's context is {self.limit} "
                              f"tokens (prompt and reply); shorten the {param}", "context_length_exceeded", param)
        return None


async def _stream(worker: GenerationWorker, kind: Kind, inputs: list[Messages] | list[str], sampling: SamplingConfig,
                  chunk: ChunkMaker, opening: list[dict[str, Any]], usage_chunk: dict[str, Any] | None,
                  ) -> AsyncIterator[bytes]:
    """The event stream of one streamed request (see the module docstring): the ``opening``
    chunks, the text pieces ``worker`` hands out, each choice's rest and ``finish_reason``,
    ``usage_chunk`` with the usage filled in (when not None), ``[DONE]``. Choice index = prompt
    index x n + sample index. The job is queued when the stream is first read."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[int, int, str] | None] = asyncio.Queue()

    def on_text(p: int, k: int, delta: str) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (p, k, delta))

    future = worker.submit(inputs, sampling, kind, on_text)
    # called in the worker thread after the last on_text, so it arrives last
    future.add_done_callback(lambda _: loop.call_soon_threadsafe(events.put_nowait, None))
    n = sampling.n
    for first in opening:
        yield sse(first)
    sent: dict[int, str] = {}
    while (event := await events.get()) is not None:
        p, k, delta = event
        sent[p * n + k] = sent.get(p * n + k, "") + delta
        yield sse(chunk(p * n + k, delta, None))
    try:
        results: list[list[Completion]] = future.result()
        if any(c.finish_reason == "error" for comps in results for c in comps):
            raise RuntimeError("generation failed for this request")
    except Exception as exc:  # noqa: BLE001 - the status line is sent; the client reads an error event
        yield sse({"error": {"message": f"generation failed: {type(exc).__name__}: {exc}", "type": "server_error",
                              "param": None, "code": 500}})
        yield sse("[DONE]")
        return
    for p, comps in enumerate(results):
        for k, c in enumerate(comps):
            done = sent.get(p * n + k, "")
            if not c.text.startswith(done):  # a backend breaking its prefix promise; nothing can be taken back
                logger.warning("streamed text of choice %d is not a prefix of its final text", p * n + k)
            elif len(c.text) > len(done):
                yield sse(chunk(p * n + k, c.text[len(done):], None))
            yield sse(chunk(p * n + k, None, c.finish_reason))
    if usage_chunk is not None:
        yield sse({**usage_chunk, "usage": usage(results)})
    yield sse("[DONE]")


def create_app(backend: Backend, model_name: str, model_path: str | None = None, default_max_tokens: int = 256,
               max_batch_prompts: int = 64, max_body_bytes: int = MAX_BODY_BYTES):
    """The FastAPI app serving ``backend`` under ``model_name``.

    ``model_path`` is also accepted as a model name in requests (so a client configured with the
    path works). The app owns a ``GenerationWorker`` (``app.state.worker``), stopped on shutdown.
    ``max_body_bytes`` limits a request's body (413 above it); a prompt with no room left in the
    backend's ``max_model_len`` is refused with 400 (see the module docstring).
    """
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import StreamingResponse

    worker = GenerationWorker(backend, max_batch_prompts=max_batch_prompts)
    counter = PromptCounter(backend)
    created = int(time.time())

    async def lifespan(app):
        yield
        worker.stop()

    app = FastAPI(title="selfevolve OpenAI-compatible server", lifespan=lifespan)
    app.state.worker = worker
    app.state.model_name = model_name

    @app.middleware("http")
    async def _body_limit(request: Request, call_next):
        if request.method in ("POST", "PUT", "PATCH"):
            length = request.headers.get("content-length")
            if length is None:
                return _error(411, "a request body needs a Content-Length header", param="content-length")
            if not length.isdigit() or int(length) > max_body_bytes:
                return _error(413, f"request body of {length} bytes is over the limit of {max_body_bytes} bytes")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors():
            loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{loc}: {e.get('msg')}")
        return _error(400, "invalid request: " + "; ".join(parts))

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_name}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created, "owned_by": "selfevolve"}]}

    def check_model(requested: str | None):
        if requested and not _same_model(requested, model_name, model_path):
            return _error(404, f"model {requested!r} is not served here; this server serves {model_name!r}",
                          "not_found_error", "model")
        return None

    async def generate(kind: Kind, inputs: list[Messages] | list[str], sampling: SamplingConfig):
        """B lists of completions, or the 500 response."""
        try:
            results = await asyncio.wrap_future(worker.submit(inputs, sampling, kind))
        except Exception as exc:  # noqa: BLE001 - reported to the client
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error")
        if any(c.finish_reason == "error" for comps in results for c in comps):
            return _error(500, "generation failed for this request", "server_error")
        return results

    def event_stream(req: SamplingFields, kind: Kind, inputs: list[Messages] | list[str], sampling: SamplingConfig,
                     chunk: ChunkMaker, opening: list[dict[str, Any]]):
        first = chunk(0, None, None)
        usage_chunk = {**first, "choices": []} if req.stream_options and req.stream_options.include_usage else None
        return StreamingResponse(_stream(worker, kind, inputs, sampling, chunk, opening, usage_chunk), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        if (refused := check_model(req.model)) is not None:
            return refused
        sampling = req.sampling(req.max_completion_tokens or req.max_tokens or default_max_tokens)
        conversation = [{"role": m.role, "content": m.text()} for m in req.messages]
        if (refused := await counter.refusal([conversation], "messages")) is not None:
            return refused
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            def chunk(index: int, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
                delta = {"role": "assistant", "content": text} if role else ({} if text is None else {"content": text})
                return {"id": rid, "object": "chat.completion.chunk", "created": now, "model": model_name,
                        "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}]}

            opening = [chunk(i, "", None, role=True) for i in range(sampling.n)]
            return event_stream(req, "chat", [conversation], sampling, chunk, opening)
        results = await generate("chat", [conversation], sampling)
        if not isinstance(results, list):
            return results
        return {
            "id": rid, "object": "chat.completion", "created": now, "model": model_name,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason, "logprobs": None}
                for i, c in enumerate(results[0])
            ],
            "usage": usage(results),
        }

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        if (refused := check_model(req.model)) is not None:
            return refused
        if type(backend).complete is Backend.complete:
            return _error(501, f"the {backend.name} backend does not continue raw text prompts; use /v1/chat/completions",
                          "not_implemented_error")
        prompts = req.prompts()
        for p in prompts:
            if isinstance(p, str):
                continue
            if not backend.token_prompts:
                return _error(400, f"the {backend.name} backend takes text prompts only; send the prompt as a string", param="prompt")
            if not p or any(t < 0 or (counter.vocab is not None and t >= counter.vocab) for t in p):
                return _error(400, f"a token-id prompt needs at least one id, each in [0, {counter.vocab}): the tokenizer's "
                              "vocabulary", param="prompt")
        if req.max_tokens == 0 and not req.echo:
            return _error(400, "max_tokens 0 generates nothing: set echo to score the prompt, or max_tokens >= 1", param="max_tokens")
        if req.logprobs is not None:
            if req.stream:
                return _error(400, "logprobs cannot be streamed by this server; send the request without stream", param="logprobs")
            if type(backend).score is Backend.score:
                return _error(501, f"the {backend.name} backend does not score text (no logprobs)", "not_implemented_error")
        sampling = req.sampling(max(1, req.max_tokens))
        if (refused := await counter.refusal(prompts, "prompt")) is not None:
            return refused
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        shown = [p if isinstance(p, str) else await asyncio.to_thread(counter.decode, p) for p in prompts]
        echo = [shown[i // sampling.n] if req.echo else "" for i in range(len(prompts) * sampling.n)]

        def choice(index: int, text: str | None, finish: str | None, logprobs: dict | None = None) -> dict[str, Any]:
            return {"index": index, "text": text or "", "finish_reason": finish, "logprobs": logprobs}

        if req.stream:
            def chunk(index: int, text: str | None, finish: str | None) -> dict[str, Any]:
                return {"id": rid, "object": "text_completion", "created": now, "model": model_name,
                        "choices": [choice(index, text, finish)]}

            opening = [chunk(i, text, None) for i, text in enumerate(echo) if text]
            return event_stream(req, "complete", prompts, sampling, chunk, opening)
        if req.max_tokens == 0:  # scoring the prompt alone
            results = [[Completion(text="", prompt_tokens=await asyncio.to_thread(counter.count, p) or 0, finish_reason="length")
                        for _ in range(sampling.n)] for p in prompts]
        else:
            results = await generate("complete", prompts, sampling)
            if not isinstance(results, list):
                return results
        flat = [c for comps in results for c in comps]
        scored: list[Any] = [None] * len(flat)
        if req.logprobs is not None:
            pairs = [(prompts[i // sampling.n], c.text if c.token_ids is None else c.token_ids) for i, c in enumerate(flat)]
            try:
                found = await asyncio.wrap_future(worker.submit(pairs, sampling, "score", top=req.logprobs))
            except ValueError as exc:
                return _error(400, f"cannot score this prompt: {exc}", param="prompt")
            except Exception as exc:  # noqa: BLE001 - reported to the client
                return _error(500, f"scoring failed: {type(exc).__name__}: {exc}", "server_error")
            scored = [(lp if req.echo else lp.tail(lp.prompt_tokens)).model_dump(exclude={"prompt_tokens"}) for lp in found]
        return {"id": rid, "object": "text_completion", "created": now, "model": model_name,
                "choices": [choice(i, echo[i] + c.text, c.finish_reason, scored[i]) for i, c in enumerate(flat)],
                "usage": usage(results)}

    return app


def serve(model_path: str, host: str = "127.0.0.1", port: int = 8000, backend: str = "hf",
          model_name: str | None = None, log_level: str = "info", dtype: str = "float32", device: str = "auto",
          adapter_path: str | None = None, max_body_bytes: int = MAX_BODY_BYTES, **backend_kwargs: Any) -> None:
    """Load ``model_path`` with ``backend`` (``hf`` or ``vllm``, built by ``make_backend``) and serve
    it until interrupted (SIGINT/SIGTERM). ``backend_kwargs`` go to the backend's constructor
    (``max_model_len``, ``batch_size``, ...). ``model_name`` defaults to ``model_path`` as given;
    ``max_body_bytes`` limits a request's body.
    Blocks; raises ``ValueError`` for another backend, ``OSError`` when the model cannot be
    loaded, ``VLLMUnavailable`` without vLLM."""
    import uvicorn

    from selfevolve.backends import make_backend
    from selfevolve.config import ModelParams

    if backend not in ("hf", "vllm"):
        raise ValueError(f"serve supports the 'hf' and 'vllm' backends, got {backend!r}")
    model = ModelParams(base=model_path, backend=backend, dtype=dtype, **({"device": device} if backend == "hf" else {}))
    be = make_backend(model, model_path=model_path, adapter_path=adapter_path, **backend_kwargs)
    name = model_name or model_path
    app = create_app(be, name, model_path=model_path, max_body_bytes=max_body_bytes)
    if host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("serving on %s: the API has no authentication; anyone who can reach this port can use it", host)
    logger.info("serving %s (%s backend) at http://%s:%d/v1", name, backend, host, port)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
    finally:
        be.close()
