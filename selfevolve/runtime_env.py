"""Process environment defaults every entry point applies before heavy imports (torch, mlflow):
no model-hub access, no telemetry, and OpenMP threads that sleep instead of spinning; and what the
CPU can do fast (:func:`native_bfloat16`), which the ``auto`` precisions read."""

from __future__ import annotations

import functools
import os
from typing import MutableMapping

DEFAULTS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # torch's OpenMP threads spin while waiting; on 2 shared cores that made generation 10-70x slower.
    "OMP_WAIT_POLICY": "PASSIVE",
    # Prefect's temporary API server (`make run` without a server) gets 20 s to start by default; on 2
    # busy cores it took longer and the campaign failed before its first stage.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    # Flow runs send a heartbeat every 30 s (Prefect's default is 180 s), so the zombie-detection
    # automation (selfevolve.orchestration.services) marks the run of a worker that died Crashed within 90 s.
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
}


def apply_defaults(env: MutableMapping[str, str] = os.environ) -> MutableMapping[str, str]:
    """Set each default in ``env`` unless it is already set; returns ``env``."""
    for k, v in DEFAULTS.items():
        env.setdefault(k, v)
    return env


@functools.cache
def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (oneDNN's check: AVX-512 BF16 or AMX
    units; asked once per process, since every training step's autocast reads it). Where it does not, PyTorch falls back to a reference kernel: measured on an AVX2 CPU,
    0.9 GFLOP/s in bfloat16 against 80 in float32, a warm-start step 8.5 s instead of 0.7 s."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
