"""LLM backends behind one interface (``selfevolve.backends.base.Backend``).

``make_backend(params.model, model_path=..., adapter_path=...)`` is the one place that knows which
implementation serves a campaign: ``hf`` (transformers, CPU/CUDA), ``vllm`` (offline engine, CUDA)
or ``openai`` (any OpenAI-compatible HTTP server). Implementations are imported lazily so that
importing this package stays cheap and works without vLLM.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig
from selfevolve.inputs import check_model_dir

if TYPE_CHECKING:  # pragma: no cover
    from selfevolve.config import ModelParams

logger = logging.getLogger(__name__)

__all__ = ["Backend", "Completion", "Messages", "SamplingConfig", "make_backend"]


def make_backend(model_params: "ModelParams", model_path: str | os.PathLike | None = None,
                 adapter_path: str | os.PathLike | None = None, **overrides: Any) -> Backend:
    """Build the backend named by ``model_params.backend`` (a ``selfevolve.config.ModelParams``).

    Args:
        model_params: the ``model`` section of params.yaml.
        model_path: the model to serve; overrides ``model_params.base`` (e.g. a cycle's checkpoint).
        adapter_path: a PEFT LoRA adapter directory (``hf`` merges it, ``vllm`` serves it with a
            ``LoRARequest``; ``openai`` cannot load one and raises ``ValueError``).
        overrides: keyword arguments for the implementation's constructor, over those taken from
            ``model_params`` (e.g. ``batch_size=16``, ``progress=True`` or ``max_model_len=None``
            (the model's own) for ``hf``).

    For ``openai`` the model name sent is ``model_params.openai_model``, else ``model_path``/``base``;
    the API key is read from the environment variable ``model_params.openai_api_key_env`` (may be
    unset for local servers). Raises ``ValueError`` for an ``openai`` backend without
    ``openai_base_url``, ``VLLMUnavailable`` (an ``ImportError``) for ``vllm`` without vLLM, and
    ``InputError`` naming the file and the fix for a local model folder that is truncated or corrupt
    (``selfevolve.inputs.check_model_dir``, before any weights are loaded).
    """
    path = str(model_path) if model_path is not None else model_params.base
    kind = model_params.backend
    if kind != "openai":
        check_model_dir(path)
    logger.info("backend %s for %s%s", kind, path, f" + adapter {adapter_path}" if adapter_path else "")
    if kind == "hf":
        from selfevolve.backends.hf import HFBackend

        return HFBackend(path, **{"dtype": model_params.dtype, "device": model_params.device, "batch_size": model_params.batch_size,
                                  "max_model_len": model_params.max_model_len, "adapter_path": adapter_path, **overrides})
    if kind == "vllm":
        from selfevolve.backends.vllm_backend import VLLMBackend

        return VLLMBackend(path, **{"dtype": model_params.dtype, "max_model_len": model_params.max_model_len,
                                    "tensor_parallel_size": model_params.tensor_parallel_size,
                                    "gpu_memory_utilization": model_params.gpu_memory_utilization,
                                    "adapter_path": adapter_path, **overrides})
    if kind == "openai":
        from selfevolve.backends.openai_backend import OpenAIBackend

        if not model_params.openai_base_url:
            raise ValueError("model.backend is 'openai' but model.openai_base_url is not set "
                             "(e.g. http://127.0.0.1:8000/v1 for `selfevolve serve`)")
        if adapter_path is not None:
            raise ValueError(f"the openai backend cannot load the adapter {adapter_path}: serve a model with the "
                             "adapter merged and name it in model.openai_model")
        name = model_params.openai_model or path
        return OpenAIBackend(model_params.openai_base_url, name,
                             api_key=os.environ.get(model_params.openai_api_key_env),
                             timeout_s=model_params.request_timeout_s, max_retries=model_params.max_retries,
                             max_concurrency=model_params.max_concurrency, **overrides)
    raise ValueError(f"unknown backend {kind!r}; expected 'hf', 'vllm' or 'openai'")
