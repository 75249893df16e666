"""Hugging Face transformers backend: batched chat generation on CPU or CUDA.

``HFBackend`` loads ``AutoTokenizer`` / ``AutoModelForCausalLM`` from a local directory or a hub id
(hub ids only resolve when the hub is reachable or cached; these machines run with
``HF_HUB_OFFLINE=1``), optionally merges a PEFT LoRA adapter, and serves
``Backend.chat(conversations, sampling)`` and ``complete(prompts, sampling)`` (raw text prompts,
steps 2-4 alike), both optionally streaming text as it is generated (``RowStreamer``), and
``score`` (log-probabilities of given text, one forward pass).

How a call runs:

1. Every conversation is rendered with the tokenizer's chat template
   (``add_generation_prompt=True``) and tokenised without extra special tokens (the template
   already carries them).
2. Each prompt is repeated ``sampling.n`` times (one *row* per sample), rows are sorted by prompt
   length (longest first) and cut into micro-batches of at most ``batch_size`` rows (and at most
   ``max_batch_tokens`` padded tokens when set), so rows of similar length share a batch and little
   compute goes to padding.
3. Each micro-batch is LEFT-padded by hand (the caller's tokenizer ``padding_side`` is never read
   or changed) with an attention mask; ``generate`` derives position ids from the mask, so a prompt
   gives the same greedy output alone and inside a batch of other lengths (tested).
   *Prefix caching*: when every prompt of the call starts with the same ``P >= 16`` tokens (the
   system turn, worked exchanges and instruction that the roles share), their keys and values are
   computed once, at batch 1, and each micro-batch starts from a copy of that cache, laid out as
   ``[shared prefix][left padding][rest of the prompt]`` (padding is masked, so positions stay
   those of the unpadded prompt). In float32 the completions are the same as without the cache
   (tested); in bfloat16 a near-tie may round the other way, as it does between batch shapes
   (speed-ups measured in docs/measurements.md).
4. Generation stops per row at EOS (every id in the model's generation config and the tokenizer's
   ``eos_token_id``), at a stop string (transformers' ``StopStringCriteria``, built once per call)
   or at the row's token limit. Texts are decoded with ``skip_special_tokens=True`` and cut before
   the first stop string.

Token counts: ``prompt_tokens`` is the templated prompt length; ``output_tokens`` counts generated
tokens up to and including EOS, or up to the token that completed a stop string. Context limit: a
row may generate at most ``min(max_new_tokens, max_model_len - prompt_tokens)`` tokens; a prompt
with no room left (``prompt_tokens >= max_model_len``) is not run and yields an empty completion
with ``finish_reason="length"`` (a warning is logged).

Sampling: ``temperature == 0`` is greedy; otherwise multinomial sampling with ``temperature`` and
``top_p`` and no top-k (``top_k=0``, as the OpenAI API and vLLM with explicit parameters do);
``repetition_penalty`` is forced to 1. With ``seed`` set, the call runs under
``torch.random.fork_rng`` seeded with it: the same call (same conversations, sampling and
``batch_size``) gives the same completions, and the caller's global RNG state is left untouched.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig, TextCallback, TokenLogprobs
from selfevolve.backends.rows import RowStreamer, common_prefix_length, finish_row
from selfevolve import runtime_env

logger = logging.getLogger(__name__)

_DTYPES = ("float32", "bfloat16", "float16", "auto")
_MIN_PREFIX = 16  # shortest shared prompt prefix worth a forward pass of its own


@dataclass
class GenerationStats:
    """Counters of the last ``chat`` call (for logs and benchmarks).

    ``rows`` = prompts x n; ``micro_batches`` = generate calls; ``padded_prompt_tokens`` counts
    prompt positions including left padding; ``cached_prefix_tokens`` is the length of the prompt
    prefix shared by every row and computed once (0 when none was cached); ``seconds`` is wall time
    of the whole call.
    """

    prompts: int = 0
    rows: int = 0
    micro_batches: int = 0
    prompt_tokens: int = 0
    padded_prompt_tokens: int = 0
    cached_prefix_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    per_batch_seconds: list[float] = field(default_factory=list)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` → ``"cuda"`` when a CUDA device is visible, else ``"cpu"``; anything else is
    returned unchanged (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_dtype(dtype: str, device: str = "cpu"):
    """The torch dtype to load in (``auto``: the checkpoint's on a GPU; on a CPU ``runtime_env.native_bfloat16``)."""
    import torch

    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return "auto" if device.startswith("cuda") else (torch.bfloat16 if runtime_env.native_bfloat16() else torch.float32)
    return getattr(torch, dtype)


def in_dtype(model, dtype: str):
    """``model`` with the weights the hf backend generates with once it is saved and loaded in
    ``dtype`` (``ModelParams.dtype``): the model itself when its floating-point weights already have
    that dtype (or ``dtype`` is ``auto`` on a GPU), else a copy cast to it; the original (a policy being
    trained in float32) is untouched. Validating a model under training must see what the stages
    will see: a small model's greedy answers can change with the rounding of its weights (measured
    on SmolLM2-135M after fine-tuning: docs/measurements.md). Raises ``ValueError`` for an unknown dtype."""
    target = _torch_dtype(dtype, next(model.parameters()).device.type)
    if target == "auto" or all(p.dtype == target for p in model.parameters() if p.is_floating_point()):
        return model
    return copy.deepcopy(model).to(target)


def render_prompt(tokenizer, conversation: Messages) -> str:
    """The prompt text for one conversation: the tokenizer's chat template with
    ``add_generation_prompt=True``; a conversation ending with an assistant message is a reply to
    continue (``continue_final_message=True``: the model goes on from that text, used to force an
    answer, ``selfevolve.roles.forcing``). A tokenizer without a chat template falls back to plain
    ``role: content`` lines ending with ``assistant:`` (logged once as a warning)."""
    prefill = bool(conversation) and conversation[-1].get("role") == "assistant"
    if getattr(tokenizer, "chat_template", None):
        if prefill:
            return tokenizer.apply_chat_template(conversation, continue_final_message=True, tokenize=False)
        return tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    if not getattr(tokenizer, "_selfevolve_warned_template", False):
        logger.warning("tokenizer has no chat template; using plain 'role: content' prompts")
        try:
            tokenizer._selfevolve_warned_template = True
        except AttributeError:  # pragma: no cover - exotic tokenizer objects
            pass
    lines = [f"{m['role']}: {m['content']}" for m in conversation]
    return "\n".join(lines if prefill else lines + ["assistant:"])


class HFBackend(Backend):
    """Batched chat generation with transformers (CPU or CUDA).

    Args:
        model_path_or_id: local directory (``save_pretrained`` output) or hub id.
        dtype: ``float32`` | ``bfloat16`` | ``float16`` | ``auto`` (:func:`_torch_dtype`: no emulated bfloat16).
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:N``.
        max_model_len: context limit in tokens (prompt + generated); ``None`` takes the model's
            ``max_position_embeddings`` (2048 when the config has none).
        adapter_path: a PEFT LoRA adapter directory; it is loaded and merged into the weights. When
            that directory holds a tokenizer, the tokenizer is loaded from there.
        batch_size: most rows (prompt x sample) per ``generate`` call. 32 measured best on 2 CPU
            cores for role prompts of 40-135 tokens (64 pads more; 8-16 add per-step overhead).
        max_batch_tokens: optional cap on ``rows x (padded prompt + max new tokens)`` per
            micro-batch (limits memory on GPUs); a single row always runs.
        progress: show a tqdm bar over micro-batches.
        trust_remote_code: passed to ``from_pretrained``.
        prefix_cache: compute the prompts' shared prefix once per call (module docstring, step 3).

    Raises ``ValueError`` for an unknown dtype and whatever ``from_pretrained`` raises for a
    missing path (``OSError``). Thread-safe: calls are serialised by a lock.
    """

    name = "hf"
    streams = True
    token_prompts = True

    def __init__(self, model_path_or_id: str | Path, dtype: str = "float32", device: str = "auto",
                 max_model_len: int | None = None, adapter_path: str | Path | None = None,
                 batch_size: int = 32, max_batch_tokens: int | None = None, progress: bool = False,
                 trust_remote_code: bool = False, prefix_cache: bool = True):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = resolve_device(device)
        torch_dtype = _torch_dtype(dtype, dev)
        src = str(model_path_or_id)
        tok_src = src
        if adapter_path is not None and (Path(adapter_path) / "tokenizer_config.json").is_file():
            tok_src = str(adapter_path)
        t0 = time.time()
        tokenizer = AutoTokenizer.from_pretrained(tok_src, trust_remote_code=trust_remote_code)
        load_kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if dev.startswith("cuda"):
            load_kwargs["device_map"] = dev
        elif dtype == "float16" or dtype == "bfloat16" and not runtime_env.native_bfloat16():
            logger.warning("%s on this %s is emulated, many times slower than float32: prefer dtype auto", dtype, dev)
        model = AutoModelForCausalLM.from_pretrained(src, **load_kwargs)
        if adapter_path is not None:
            from peft import PeftModel

            if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
                model.resize_token_embeddings(len(tokenizer))
            model = PeftModel.from_pretrained(model, str(adapter_path))
            model = model.merge_and_unload()
        if not dev.startswith("cuda"):
            model.to(dev)
        model.eval()
        logger.info("loaded %s%s on %s (%s) in %.1fs", src, f" + adapter {adapter_path}" if adapter_path else "",
                    dev, dtype, time.time() - t0)
        self._setup(model, tokenizer, max_model_len, batch_size, max_batch_tokens, progress, prefix_cache)
        self.model_path = src
        self.adapter_path = None if adapter_path is None else str(adapter_path)

    @classmethod
    def from_pretrained_objects(cls, model, tokenizer, max_model_len: int | None = None, batch_size: int = 32,
                                max_batch_tokens: int | None = None, progress: bool = False,
                                prefix_cache: bool = True) -> "HFBackend":
        """Wrap an already-loaded ``(model, tokenizer)`` pair (e.g. the policy a trainer is
        updating, PEFT-wrapped or not) without copying it. Generation runs on the model's device
        in eval mode under ``torch.inference_mode``; the model's previous train/eval mode is
        restored after each call. The tokenizer is not modified."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, max_model_len, batch_size, max_batch_tokens, progress, prefix_cache)
        self.model_path = getattr(getattr(model, "config", None), "_name_or_path", None)
        self.adapter_path = None
        return self

    def _setup(self, model, tokenizer, max_model_len, batch_size, max_batch_tokens, progress, prefix_cache) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.max_batch_tokens = max_batch_tokens
        self.progress = progress
        self.prefix_cache = bool(prefix_cache)
        cfg = getattr(model, "config", None)
        if max_model_len is None:
            max_model_len = getattr(cfg, "max_position_embeddings", None) or 2048
        self.max_model_len = int(max_model_len)
        eos: set[int] = set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]):
            if e is not None:
                eos.add(int(e))
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        if not eos:
            raise ValueError("neither the tokenizer nor the model's generation config defines an EOS token")
        self.eos_ids = eos
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
        self._lock = threading.Lock()
        self.last_stats = GenerationStats()

    @property
    def device(self):
        import torch

        try:
            return next(self.model.parameters()).device
        except StopIteration:  # pragma: no cover - parameterless model
            return torch.device("cpu")

    # ------------------------------------------------------------------ encoding
    def encode(self, conversations: list[Messages]) -> list[list[int]]:
        """Token ids of each templated prompt (``add_generation_prompt=True``), shape B x L_i."""
        texts = [render_prompt(self.tokenizer, c) for c in conversations]
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _micro_batches(self, lengths: list[int], limits: list[int]) -> list[list[int]]:
        """Row indices grouped into micro-batches: longest prompts first, at most ``batch_size``
        rows and (when set) ``max_batch_tokens`` padded tokens each."""
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        batches: list[list[int]] = []
        cur: list[int] = []
        cur_len = cur_new = 0
        for i in order:
            new_len, new_new = max(cur_len, lengths[i]), max(cur_new, limits[i])
            too_many = len(cur) >= self.batch_size
            too_big = self.max_batch_tokens is not None and cur and (len(cur) + 1) * (new_len + new_new) > self.max_batch_tokens
            if cur and (too_many or too_big):
                batches.append(cur)
                cur, new_len, new_new = [], lengths[i], limits[i]
            cur.append(i)
            cur_len, cur_new = new_len, new_new
        if cur:
            batches.append(cur)
        return batches

    def _stop_criteria(self, stop: list[str]):
        """A ``StoppingCriteriaList`` ending rows at the stop strings, or ``None`` (no stops, or the
        tokenizer is unsupported by transformers' matcher: then text is still cut afterwards)."""
        stop = [s for s in stop if s]
        if not stop:
            return None
        try:
            from transformers import StoppingCriteriaList
            from transformers.generation.stopping_criteria import StopStringCriteria

            return StoppingCriteriaList([StopStringCriteria(tokenizer=self.tokenizer, stop_strings=stop)])
        except Exception as exc:  # noqa: BLE001 - only an optimisation; truncation still applies
            logger.debug("StopStringCriteria unavailable (%s); stop strings applied after generation", exc)
            return None

    # ------------------------------------------------------------------ generation
    def chat(self, conversations: list[Messages], sampling: SamplingConfig,
             on_text: TextCallback | None = None) -> list[list[Completion]]:
        """Generate ``sampling.n`` completions for each of the B conversations.

        Returns B lists of ``sampling.n`` ``Completion`` (input order; sample order within a
        prompt is the order of its rows). With ``on_text``, text is also handed out while it is
        generated (see ``Backend.streams``). See the module docstring for batching, stopping,
        token counting and seeding.
        """
        with self._lock:
            return self._generate(self.encode(conversations) if conversations else [], sampling, on_text)

    def complete(self, prompts: list[str] | list[list[int]], sampling: SamplingConfig,
                 on_text: TextCallback | None = None) -> list[list[Completion]]:
        """``sampling.n`` continuations of each of the B raw prompts (no chat template): a text is
        tokenised with the tokenizer's own special tokens (e.g. BOS) as for any raw text, a list of
        token ids is taken as it is. Same shapes, stopping, counting and ``on_text`` as ``chat``."""
        with self._lock:
            return self._generate(self._raw_ids(prompts), sampling, on_text)

    def _raw_ids(self, prompts: list[str] | list[list[int]], special: bool = True) -> list[list[int]]:
        texts = [i for i, p in enumerate(prompts) if isinstance(p, str)]
        ids: list[list[int]] = [list(p) if not isinstance(p, str) else [] for p in prompts]
        if texts:
            for i, row in zip(texts, self.tokenizer([prompts[i] for i in texts], add_special_tokens=special)["input_ids"]):
                ids[i] = list(row)
        return ids

    def score(self, prompts: list[str] | list[list[int]], continuations: list[str] | list[list[int]],
              top: int = 1) -> list[TokenLogprobs]:
        """Log-probabilities of each ``prompt + continuation`` (B pairs) under the model, in float32
        from one forward pass per micro-batch of ``batch_size`` rows (right-padded); see
        ``Backend.score``; token strings are each id decoded alone. Raises ``ValueError`` when the
        two lists differ in length or a sequence is longer than ``max_model_len``."""
        import torch

        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        with self._lock:
            heads = self._raw_ids(prompts)
            seqs = [h + t for h, t in zip(heads, self._raw_ids(continuations, special=False))]
            for i, seq in enumerate(seqs):
                if len(seq) > self.max_model_len:
                    raise ValueError(f"sequence {i} has {len(seq)} tokens, max_model_len is {self.max_model_len}")
            out: list[TokenLogprobs | None] = [None] * len(seqs)
            model, was_training = self.model, bool(getattr(self.model, "training", False))
            text = lambda i: self.tokenizer.decode([i])  # noqa: E731
            try:
                model.eval()
                with torch.inference_mode():
                    for batch in self._micro_batches([len(q) for q in seqs], [0] * len(seqs)):
                        width = max(len(seqs[i]) for i in batch)
                        ids_t = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
                        mask_t = torch.zeros((len(batch), width), dtype=torch.long)
                        for r, i in enumerate(batch):
                            ids_t[r, :len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
                            mask_t[r, :len(seqs[i])] = 1
                        logits = model(input_ids=ids_t.to(self.device), attention_mask=mask_t.to(self.device)).logits
                        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).cpu()
                        picked = logp.gather(-1, ids_t[:, 1:, None]).squeeze(-1)
                        best = logp.topk(top, dim=-1) if top > 0 else None
                        for r, i in enumerate(batch):
                            n = len(seqs[i])
                            tops = None if best is None else [
                                [(text(t), v) for v, t in zip(best.values[r, j].tolist(), best.indices[r, j].tolist())] for j in range(n - 1)]
                            out[i] = TokenLogprobs.of([text(t) for t in seqs[i]], picked[r, :n - 1].tolist(), tops, len(heads[i]))
            finally:
                if was_training:
                    model.train()
            return out  # type: ignore[return-value]

    def _generate(self, prompts: list[list[int]], sampling: SamplingConfig,
                  on_text: TextCallback | None) -> list[list[Completion]]:
        """The generation behind ``chat`` and ``complete``: B prompts as token ids (B x L_i) to B
        lists of ``sampling.n`` completions. The caller holds ``self._lock``."""
        import torch
        from tqdm import tqdm

        t0 = time.time()
        stats = GenerationStats(prompts=len(prompts))
        out: list[list[Completion | None]] = [[None] * sampling.n for _ in prompts]
        if not prompts:
            self.last_stats = stats
            return []
        rows: list[tuple[int, int]] = []  # (conversation, sample)
        lengths: list[int] = []
        limits: list[int] = []
        for ci, ids in enumerate(prompts):
            room = self.max_model_len - len(ids)
            if room < 1:
                logger.warning("prompt %d has %d tokens, max_model_len is %d: no room to generate", ci, len(ids), self.max_model_len)
                for s in range(sampling.n):
                    out[ci][s] = Completion(text="", prompt_tokens=len(ids), output_tokens=0, finish_reason="length")
                continue
            for s in range(sampling.n):
                rows.append((ci, s))
                lengths.append(len(ids))
                limits.append(min(sampling.max_new_tokens, room))
        batches = self._micro_batches(lengths, limits)
        stats.rows, stats.micro_batches = len(rows), len(batches)
        criteria = self._stop_criteria(sampling.stop)
        gen_kwargs: dict[str, Any] = {"do_sample": sampling.temperature > 0, "repetition_penalty": 1.0,
                                      "eos_token_id": sorted(self.eos_ids), "pad_token_id": self.pad_id,
                                      "use_cache": True, "num_beams": 1}
        if sampling.temperature > 0:
            gen_kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        if criteria is not None:
            gen_kwargs["stopping_criteria"] = criteria

        model = self.model
        was_training = bool(getattr(model, "training", False))
        device = self.device
        fork_devices = [device.index or 0] if device.type == "cuda" else []
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        try:
            model.eval()
            with torch.random.fork_rng(devices=fork_devices, enabled=sampling.seed is not None), torch.inference_mode():
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                shared, prefix = self._shared_prefix([prompts[ci] for ci in sorted({ci for ci, _ in rows})], device)
                stats.cached_prefix_tokens = head = len(shared)  # [shared prefix][left padding][rest of the prompt]
                shared_t = torch.tensor(shared, dtype=torch.long)
                bar = tqdm(total=len(batches), desc="generate", unit="batch", disable=not self.progress)
                for batch in batches:
                    tb = time.time()
                    width = max(lengths[i] for i in batch)
                    new = max(limits[i] for i in batch)
                    ids_t = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
                    mask_t = torch.zeros((len(batch), width), dtype=torch.long)
                    ids_t[:, :head] = shared_t
                    mask_t[:, :head] = 1
                    for r, i in enumerate(batch):
                        rest = prompts[rows[i][0]][head:]
                        ids_t[r, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
                        mask_t[r, width - len(rest):] = 1
                    streamer = None if on_text is None else RowStreamer(
                        [rows[i] for i in batch], [limits[i] for i in batch], eos_ids=self.eos_ids,
                        decode=decode, stop=sampling.stop, on_text=on_text)
                    cache_kwargs: dict[str, Any] = {}
                    if prefix is not None:
                        cache = copy.deepcopy(prefix)
                        cache.batch_repeat_interleave(len(batch))
                        cache_kwargs["cache"] = cache
                    gen = model.generate(input_ids=ids_t.to(device), attention_mask=mask_t.to(device),
                                         max_new_tokens=new, streamer=streamer, **cache_kwargs, **gen_kwargs)
                    gen = gen[:, width:].tolist()
                    for r, i in enumerate(batch):
                        ci, s = rows[i]
                        text, n_out, reason = finish_row(gen[r], limit=limits[i], eos_ids=self.eos_ids,
                                                         pad_id=self.pad_id, decode=decode, stop=sampling.stop)
                        body = gen[r][:limits[i]]
                        body = body[:next((j for j, t in enumerate(body) if t in self.eos_ids), len(body))]
                        out[ci][s] = Completion(text=text, prompt_tokens=lengths[i], output_tokens=n_out, finish_reason=reason,
                                                token_ids=body if len(body) <= n_out and decode(body) == text else None)
                        stats.output_tokens += n_out
                    stats.prompt_tokens += sum(lengths[i] for i in batch)
                    stats.padded_prompt_tokens += width * len(batch)
                    stats.per_batch_seconds.append(time.time() - tb)
                    logger.debug("micro-batch of %d rows, width %d, %d new tokens max: %.2fs", len(batch), width, new, time.time() - tb)
                    bar.update(1)
                bar.close()
        finally:
            if was_training:
                model.train()
        stats.seconds = time.time() - t0
        self.last_stats = stats
        logger.info("hf generated %d rows in %d micro-batches: %d output tokens in %.2fs (%.1f tok/s, %d-token prefix cached)",
                    stats.rows, stats.micro_batches, stats.output_tokens, stats.seconds, stats.output_tokens_per_s,
                    stats.cached_prefix_tokens)
        return [list(c) for c in out]  # type: ignore[arg-type]

    def _shared_prefix(self, prompts: list[list[int]], device) -> tuple[list[int], Any]:
        """``(ids, cache)``: the longest prefix every prompt starts with, leaving each at least one
        token of its own (``generate`` needs one uncached input per row), and the model's key/value
        cache of it at batch 1; ``([], None)`` when caching is off, fewer than ``_MIN_PREFIX``
        tokens are shared or the model returns no ``transformers.Cache``. Runs under the
        caller's ``inference_mode``."""
        if not self.prefix_cache or not prompts:
            return [], None
        n = common_prefix_length(prompts)
        if n < _MIN_PREFIX:
            return [], None
        import torch
        from transformers import Cache

        ids = prompts[0][:n]
        out = self.model(input_ids=torch.tensor([ids], dtype=torch.long, device=device), use_cache=True)
        cache = out["cache"] if "cache" in out else getattr(out, "past_key_values", None)  # ``cache`` since transformers 5
        if not isinstance(cache, Cache):
            logger.debug("model returned no transformers Cache; prompts are not prefix-cached")
            return [], None
        return ids, cache

    def close(self) -> None:
        """Drop the references to the model and tokenizer (memory is freed when nothing else holds them)."""
        self.model = None
        self.tokenizer = None
