"""An OpenAI-compatible HTTP server over a local backend (``selfevolve serve MODEL_PATH``).

Endpoints (FastAPI, served by uvicorn, bound to 127.0.0.1 by default):

- ``POST /v1/chat/completions``: OpenAI chat schema. Request fields used: ``model``, ``messages``
  (``content`` a string or a list of ``{"type": "text", "text": ...}`` parts), ``temperature``
  (default 1), ``top_p`` (default 1), ``max_tokens`` / ``max_completion_tokens`` (default
  ``default_max_tokens``), ``n`` (default 1), ``stop`` (string or list), ``seed``. Unknown fields
  are ignored; ``stream: true`` is refused (400). Response: ``id``, ``object: "chat.completion"``,
  ``created``, ``model``, ``choices[{index, message{role, content}, finish_reason}]``,
  ``usage{prompt_tokens, completion_tokens, total_tokens}`` (``completion_tokens`` summed over the
  ``n`` choices).
- ``GET /v1/models``: the one served model.
- ``GET /health``: ``{"status": "ok", "model": ...}``.

Errors use OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400 for an invalid
request, 404 for another model name, 500 when generation fails.

Request limits, checked before anything is queued for generation, so that one client cannot stall the
others: a body over ``max_body_bytes`` (default 2 MiB) is refused with 413 from its
``Content-Length`` before it is read (a POST without one gets 411), and a prompt whose templated
token count leaves no room to generate within the backend's ``max_model_len`` gets 400 "prompt
exceeds the context" (counted with a private copy of the backend's tokenizer, off the event loop).

Generation runs in ONE worker thread (the backend is not shared between threads; the HF backend
also holds its own lock). Requests that arrive while the worker is busy are queued, and queued
requests with identical sampling parameters are generated together in one batched ``chat`` call
(up to ``max_batch_prompts`` conversations), which is what makes a concurrent client fast on a
CPU. Seeded sampling requests (``seed`` set and ``temperature > 0``) always run alone, so their
output does not depend on what else was queued.
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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig

logger = logging.getLogger(__name__)


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


class ChatCompletionRequest(BaseModel):
    """The subset of OpenAI's chat completion request this server honours."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=256)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False


@dataclass
class _Job:
    conversations: list[Messages]
    sampling: SamplingConfig
    future: Future = field(default_factory=Future)


class GenerationWorker:
    """One thread that owns the backend and runs queued jobs, batching compatible ones.

    ``submit(conversations, sampling)`` returns a ``concurrent.futures.Future`` resolving to
    ``backend.chat(conversations, sampling)`` (or raising its exception).
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
    def _batchable(s: SamplingConfig) -> bool:
        return s.temperature == 0 or s.seed is None

    def submit(self, conversations: list[Messages], sampling: SamplingConfig) -> Future:
        if self._stopped:
            raise RuntimeError("generation worker is stopped")
        job = _Job(conversations, sampling)
        self._queue.put(job)
        return job.future

    def _take_compatible(self, first: _Job) -> list[_Job]:
        """``first`` plus every waiting job with the same sampling parameters (in arrival order,
        up to ``max_batch_prompts`` conversations); the others keep their place in line."""
        jobs = [first]
        if not self._batchable(first.sampling):
            return jobs
        while True:
            try:
                self._pending.append(self._queue.get_nowait())
            except queue.Empty:
                break
        size = len(first.conversations)
        keep: deque[_Job | None] = deque()
        while self._pending:
            job = self._pending.popleft()
            if job is not None and job.sampling == first.sampling and size + len(job.conversations) <= self.max_batch_prompts:
                jobs.append(job)
                size += len(job.conversations)
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
            convs = [c for j in jobs for c in j.conversations]
            t0 = time.time()
            try:
                with self._lock:
                    results = self.backend.chat(convs, first.sampling)
            except BaseException as exc:  # noqa: BLE001 - delivered to every waiting request
                logger.exception("generation failed for %d conversation(s)", len(convs))
                for j in jobs:
                    j.future.set_exception(exc)
                continue
            self.batches_run += 1
            logger.info("served %d request(s), %d conversation(s) in one batch: %.2fs", len(jobs), len(convs), time.time() - t0)
            k = 0
            for j in jobs:
                j.future.set_result(results[k:k + len(j.conversations)])
                k += len(j.conversations)

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
        self._lock = threading.Lock()

    def count(self, conversation: Messages) -> int | None:
        """Tokens of the prompt ``conversation`` renders to (chat template, generation prompt)."""
        if self._tok is None:
            return None
        from selfevolve.backends.hf import render_prompt

        with self._lock:
            return len(self._tok(render_prompt(self._tok, conversation), add_special_tokens=False)["input_ids"])


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

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        if req.model and not _same_model(req.model, model_name, model_path):
            return _error(404, f"model {req.model!r} is not served here; this server serves {model_name!r}",
                          "not_found_error", "model")
        if req.stream:
            return _error(400, "stream=true is not supported by this server", param="stream")
        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        sampling = SamplingConfig(
            temperature=req.temperature, top_p=req.top_p, n=req.n, seed=req.seed, stop=[s for s in stop if s],
            max_new_tokens=req.max_completion_tokens or req.max_tokens or default_max_tokens,
        )
        conversation = [{"role": m.role, "content": m.text()} for m in req.messages]
        if counter.limit is not None:
            tokens = await asyncio.to_thread(counter.count, conversation)
            if tokens is not None and tokens >= counter.limit:
                return _error(400, f"prompt exceeds the context: {tokens} tokens, the model's context is {counter.limit} "
                              "tokens (prompt and reply); shorten the messages", "context_length_exceeded", "messages")
        try:
            results = await asyncio.wrap_future(worker.submit([conversation], sampling))
        except Exception as exc:  # noqa: BLE001 - reported to the client
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error")
        comps: list[Completion] = results[0]
        if any(c.finish_reason == "error" for c in comps):
            return _error(500, "generation failed for this request", "server_error")
        completion_tokens = sum(c.output_tokens for c in comps)
        prompt_tokens = comps[0].prompt_tokens if comps else 0
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason, "logprobs": None}
                for i, c in enumerate(comps)
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

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
