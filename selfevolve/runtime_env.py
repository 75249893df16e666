"""Process environment defaults every entry point applies before heavy imports (torch, mlflow):
no model-hub access, no telemetry, and OpenMP threads that spin only briefly before they sleep
(:data:`SPIN_DEFAULT`); and what the CPU can do fast (:func:`native_bfloat16`), which the ``auto``
precisions read."""

from __future__ import annotations

import functools
import os
from typing import Mapping, MutableMapping

DEFAULTS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Prefect's temporary API server (`make run` without a server) gets 20 s to start by default; on 2
    # busy cores it took longer and the campaign failed before its first stage.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    # Flow runs send a heartbeat every 30 s (Prefect's default is 180 s), so the zombie-detection
    # automation (selfevolve.orchestration.services) marks the run of a worker that died Crashed within 90 s.
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
}


SPIN_DEFAULT: dict[str, str] = {"GOMP_SPINCOUNT": "1000"}
"""How long torch's OpenMP (libgomp) threads spin after a parallel region before they sleep: 1,000
spins (about 10 us), unless the environment sets ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` itself.
A training step of the embedded model runs thousands of small kernels, each a parallel region.
Measured on 2 cores (the warm start's step, 2 threads; docs/measurements.md, "Where `make run`'s
time goes"):

- alone: 7.0 steps/s at 1,000 spins, 7.1 at libgomp's default (300,000), 4.9 with
  ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at once and every kernel waits for them to wake);
- two such processes on the 2 cores: 3.5 steps/s each at 1,000 spins, 4.1 passive, and 1.2 at the
  default or 10,000 spins (each process's spinning threads take the cores the other's need: the
  10-70x slower generation on shared cores that ``PASSIVE`` was set for).

So a campaign alone on the machine runs 1.4x faster than passive, and side by side with another
it loses 15 % instead of 3.5x. Set ``OMP_WAIT_POLICY=PASSIVE`` where many torch processes share
few cores (the test suite's workers do)."""


def wait_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """:data:`DEFAULTS`, with :data:`SPIN_DEFAULT` unless ``env`` chooses the OpenMP wait policy
    itself (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` set)."""
    chosen = any(k in env for k in ("OMP_WAIT_POLICY", *SPIN_DEFAULT))
    return {**DEFAULTS, **({} if chosen else SPIN_DEFAULT)}


def apply_defaults(env: MutableMapping[str, str] = os.environ) -> MutableMapping[str, str]:
    """Set each default (:func:`wait_defaults`) in ``env`` unless it is already set; returns ``env``."""
    for k, v in wait_defaults(env).items():
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


NUMERICS_TAGS = ("selfevolve.cpu_capability", "selfevolve.native_bfloat16", "selfevolve.torch_threads", "selfevolve.torch_version")


def numerics_tags() -> dict[str, str]:
    """The numerical path this process trains and generates on, as MLflow tags (:data:`NUMERICS_TAGS`):
    the vector ISA PyTorch dispatches its CPU kernels to (``torch.backends.cpu.get_cpu_capability()``:
    ``AVX2``, ``AVX512``, ...), whether ``model.train_precision: auto`` trains in bfloat16 here
    (:func:`native_bfloat16`), the intra-op threads and the torch version. The same commit, params
    and seed train other weights on another path (docs/measurements.md, "Reproducibility"), so a
    campaign's numbers are compared with the path they came from. Empty in a process that has not
    imported torch (it ran no model numerics; importing it here would cost ~1.7 s a stage)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    return dict(zip(NUMERICS_TAGS, (torch.backends.cpu.get_cpu_capability(), str(native_bfloat16()).lower(),
                                    str(torch.get_num_threads()), torch.__version__)))
