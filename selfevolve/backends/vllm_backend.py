"""vLLM offline-engine backend (CUDA machines).

``vllm`` is imported inside ``VLLMBackend.__init__`` only, so this module imports (and its pure
helpers run) on machines without vLLM; constructing the backend there raises ``VLLMUnavailable``
telling you to install ``requirements-gpu.txt`` on a CUDA machine.

Prompts are rendered with the model tokenizer's chat template (``add_generation_prompt=True``) and
tokenised here, exactly as the ``hf`` backend does, then passed to ``LLM.generate`` as token-id
prompts: both backends see identical prompt tokens. A prompt with no room left in
``max_model_len`` yields an empty ``finish_reason="length"`` completion (vLLM would reject the
whole batch). A LoRA adapter is served through ``enable_lora`` + ``LoRARequest`` (its rank is read
from ``adapter_config.json`` to size ``max_lora_rank``).

The CPU-side logic is in pure functions tested without vLLM: ``to_vllm_sampling_kwargs`` and
``from_vllm_outputs``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Iterable

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig

logger = logging.getLogger(__name__)

INSTALL_HINT = ("the vllm backend needs the vllm package: install requirements-gpu.txt on a CUDA machine "
                "(pip install -r requirements-gpu.txt), or set model.backend to 'hf' or 'openai'")


class VLLMUnavailable(ImportError):
    """vLLM is not installed (or cannot be imported) on this machine."""


def to_vllm_sampling_kwargs(sampling: SamplingConfig) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` equivalent to ``sampling``.

    Keys: ``temperature`` (0 = greedy), ``top_p``, ``max_tokens`` (= ``max_new_tokens``), ``n``,
    ``seed`` (``None`` when unset) and ``stop`` (list; the stop string is excluded from the text,
    vLLM's default). No top-k, matching the other backends.
    """
    return {
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "max_tokens": int(sampling.max_new_tokens),
        "n": int(sampling.n),
        "seed": sampling.seed,
        "stop": [s for s in sampling.stop if s],
    }


def _finish_reason(raw: Any) -> str:
    if raw == "length":
        return "length"
    if raw in ("abort", "error"):
        return "error"
    return "stop"


def from_vllm_outputs(outputs: Iterable[Any]) -> list[list[Completion]]:
    """Convert vLLM ``RequestOutput`` objects (duck-typed: ``.prompt_token_ids`` and
    ``.outputs[i].text / .token_ids / .finish_reason``) into B lists of ``Completion``.

    ``prompt_tokens`` = ``len(prompt_token_ids)``; ``output_tokens`` = ``len(token_ids)`` (vLLM
    counts the EOS token it stopped on); ``finish_reason`` ``"length"`` stays, ``"abort"`` /
    ``"error"`` become ``"error"``, everything else (``"stop"``, ``None``) is ``"stop"``. Samples keep
    vLLM's order (sorted by ``.index`` when present).
    """
    result: list[list[Completion]] = []
    for out in outputs:
        n_prompt = len(out.prompt_token_ids or [])
        samples = sorted(out.outputs, key=lambda o: getattr(o, "index", 0))
        result.append([
            Completion(text=o.text or "", prompt_tokens=n_prompt, output_tokens=len(o.token_ids or []),
                       finish_reason=_finish_reason(getattr(o, "finish_reason", None)))
            for o in samples
        ])
    return result


def adapter_rank(adapter_path: str | Path) -> int | None:
    """LoRA rank ``r`` from ``adapter_config.json`` in ``adapter_path`` (``None`` when absent)."""
    cfg = Path(adapter_path) / "adapter_config.json"
    if not cfg.is_file():
        return None
    try:
        return int(json.loads(cfg.read_text())["r"])
    except (KeyError, ValueError, TypeError):
        return None


_LORA_RANK_SLOTS = (8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_slot(rank: int) -> int:
    """The smallest ``max_lora_rank`` value vLLM accepts that fits an adapter of rank ``rank``."""
    return next((s for s in _LORA_RANK_SLOTS if s >= rank), rank)


def _import_vllm():
    try:
        import vllm  # noqa: F401
        from vllm import LLM, SamplingParams
    except Exception as exc:  # ImportError, or CUDA libraries missing at import time
        raise VLLMUnavailable(f"{INSTALL_HINT} ({type(exc).__name__}: {exc})") from exc
    return LLM, SamplingParams


def _engine_max_model_len(llm) -> int:
    """The context length the engine settled on (its model config moved between vLLM versions)."""
    for owner in (getattr(llm, "llm_engine", None), llm):
        cfg = getattr(owner, "model_config", None)
        if cfg is not None and getattr(cfg, "max_model_len", None):
            return int(cfg.max_model_len)
    return 1 << 30  # unknown: let vLLM itself reject over-long prompts


class VLLMBackend(Backend):
    """Batched chat generation with vLLM's offline ``LLM`` engine.

    Args:
        model_path_or_id: local directory or hub id.
        dtype: ``float32`` | ``bfloat16`` | ``float16`` | ``auto``.
        max_model_len: context limit (prompt + generated tokens).
        tensor_parallel_size: GPUs to shard the model over.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (weights + KV cache).
        adapter_path: a PEFT LoRA adapter directory served with ``LoRARequest``.
        seed: engine seed (per-request seeds come from ``SamplingConfig.seed``).
        progress: show vLLM's tqdm bar.
        engine_kwargs: extra ``LLM(...)`` arguments (e.g. ``enforce_eager=True``).

    Raises ``VLLMUnavailable`` (an ``ImportError``) when vLLM cannot be imported.
    """

    name = "vllm"

    def __init__(self, model_path_or_id: str | Path, dtype: str = "auto", max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.85,
                 adapter_path: str | Path | None = None, seed: int = 0, progress: bool = False,
                 trust_remote_code: bool = False, **engine_kwargs: Any):
        LLM, SamplingParams = _import_vllm()
        self._SamplingParams = SamplingParams
        self.model_path = str(model_path_or_id)
        self.adapter_path = None if adapter_path is None else str(adapter_path)
        self.progress = progress
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "dtype": dtype,
            "tensor_parallel_size": int(tensor_parallel_size),
            "gpu_memory_utilization": float(gpu_memory_utilization),
            "seed": seed,
            "trust_remote_code": trust_remote_code,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = int(max_model_len)
        self.lora_request = None
        if self.adapter_path is not None:
            from vllm.lora.request import LoRARequest

            kwargs["enable_lora"] = True
            rank = adapter_rank(self.adapter_path)
            if rank is not None:
                kwargs["max_lora_rank"] = lora_rank_slot(rank)
            self.lora_request = LoRARequest("adapter", 1, self.adapter_path)
        kwargs.update(engine_kwargs)
        t0 = time.time()
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(max_model_len) if max_model_len is not None else _engine_max_model_len(self.llm)
        logger.info("vllm engine for %s%s ready in %.1fs", self.model_path,
                    f" + adapter {self.adapter_path}" if self.adapter_path else "", time.time() - t0)

    def chat(self, conversations: list[Messages], sampling: SamplingConfig) -> list[list[Completion]]:
        """B conversations → B lists of ``sampling.n`` completions (input order)."""
        from selfevolve.backends.hf import render_prompt

        if not conversations:
            return []
        texts = [render_prompt(self.tokenizer, c) for c in conversations]
        prompts = [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        out: list[list[Completion] | None] = [None] * len(prompts)
        run: list[int] = []
        for i, ids in enumerate(prompts):
            if len(ids) >= self.max_model_len:
                logger.warning("prompt %d has %d tokens, max_model_len is %d: no room to generate", i, len(ids), self.max_model_len)
                out[i] = [Completion(text="", prompt_tokens=len(ids), finish_reason="length") for _ in range(sampling.n)]
            else:
                run.append(i)
        if run:
            params = self._SamplingParams(**to_vllm_sampling_kwargs(sampling))
            outputs = self.llm.generate([{"prompt_token_ids": prompts[i]} for i in run], params,
                                        use_tqdm=self.progress, lora_request=self.lora_request)
            for i, comps in zip(run, from_vllm_outputs(outputs)):
                out[i] = comps
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Drop the engine (GPU memory is released when the engine is garbage-collected)."""
        self.llm = None
