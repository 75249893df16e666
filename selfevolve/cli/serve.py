"""``selfevolve serve``: an OpenAI-compatible HTTP server over a local model."""

from __future__ import annotations

import logging
from typing import Optional

import typer

from selfevolve.cli.common import fail


def serve(
    model_path: str = typer.Argument(..., help="model directory (save_pretrained output, e.g. models/base) or hub id"),
    host: str = typer.Option("127.0.0.1", help="address to bind; keep the loopback default unless the port is firewalled (no auth)"),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port"),
    backend: str = typer.Option("hf", help="generation backend: 'hf' (transformers, CPU/CUDA) or 'vllm' (CUDA)"),
    model_name: Optional[str] = typer.Option(None, help="name clients send as 'model' (default: MODEL_PATH as given)"),
    dtype: str = typer.Option("float32", help="float32 | bfloat16 | float16 | auto"),
    device: str = typer.Option("auto", help="hf backend: auto | cpu | cuda | cuda:N"),
    max_model_len: Optional[int] = typer.Option(None, min=2, help="context limit in tokens (default: the model's)"),
    adapter: Optional[str] = typer.Option(None, help="PEFT LoRA adapter directory to apply"),
    batch_size: int = typer.Option(32, min=1, help="hf backend: rows per generate call"),
    threads: Optional[int] = typer.Option(None, min=1, help="hf backend on CPU: torch intra-op threads (default: torch's choice; 1 avoids oversubscription when other CPU jobs share the machine)"),
    max_body_bytes: int = typer.Option(2 << 20, min=1024, help="largest request body in bytes (413 above it); a prompt "
                                       "longer than the context is refused with 400 before generation"),
    log_level: str = typer.Option("info", help="debug | info | warning | error"),
) -> None:
    """Serve MODEL_PATH over an OpenAI-compatible API until stopped (Ctrl-C or SIGTERM).

    Endpoints: POST /v1/chat/completions (model, messages, temperature, top_p, max_tokens, n, stop, seed, stream), POST /v1/completions (raw prompt or list of prompts, max_tokens, temperature, n, stop, echo, stream), GET /v1/models, GET /health. stream=true answers with server-sent events as OpenAI's API does. Concurrent requests with the same sampling parameters are generated together in one batch by a single worker thread.

    Use it from the pipeline with model.backend: openai and model.openai_base_url: http://127.0.0.1:PORT/v1 in params.yaml.

    Example: selfevolve serve models/base --port 8000
    """
    from selfevolve.backends.serve import serve as serve_model

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if backend not in ("hf", "vllm"):
        fail(f"--backend must be 'hf' or 'vllm', got {backend!r}")
    if dtype not in ("float32", "bfloat16", "float16", "auto"):
        fail(f"--dtype must be float32, bfloat16, float16 or auto, got {dtype!r}")
    kwargs = {"dtype": dtype, "max_model_len": max_model_len, "adapter_path": adapter}
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    if backend == "hf":
        kwargs.update(device=device, batch_size=batch_size)
    try:
        serve_model(model_path, host=host, port=port, backend=backend, model_name=model_name, log_level=log_level,
                    max_body_bytes=max_body_bytes, **kwargs)
    except ImportError as exc:
        fail(str(exc))
    except (OSError, ValueError) as exc:
        fail(f"cannot serve {model_path!r}: {exc}")
