"""Fixtures shared by the test modules (pytest finds them here; no module imports them).

``bench_dir``: the real benchmark files (GSM8K, MATH-500, ...) in ``../shared/benchmarks``.

``pool``: a sandbox pool of 2 workers for one test module.

``tiny_model_dir``: an untrained tiny Llama + tokenizer (chat template included) built with
``selfevolve.embedded.tinymodel.save_untrained`` from a few hundred rendered role transcripts, in seconds.

``varied_tiny_model_dir``: the same model with its weight matrices redrawn at a larger standard
deviation (0.15 instead of the 0.02 init). A freshly initialised model's logits are nearly flat,
so greedy decoding repeats one token whatever the prompt, which makes padding, stop-string and
seeding tests vacuous. With the larger weights the output depends strongly on every prompt token
and position (and sometimes ends with EOS), so a wrong attention mask or position id changes the
text (checked: dropping the padding mask fails the backend's left-padding test).

Each model is built once per test process (the modules that use it share the directory).

``one_torch_thread``: a module's tiny-model work on one intra-op thread.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from selfevolve.runtime_env import apply_defaults

# The suite runs a test file per core (pytest-xdist): OpenMP threads that spin would take the cores
# the other worker needs (runtime_env.SPIN_DEFAULT), so its torch threads sleep at once.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
apply_defaults()


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# A suite stopped by SIGTERM (``timeout``, CI cancelling a job) tears its fixtures down as on Ctrl-C:
# Python's default SIGTERM ends the process at once, and the MLflow and Prefect servers a module
# fixture started in their own process groups (test_cluster, test_campaign_e2e) kept running.
if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _interrupt)

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT.parent / "shared" / "benchmarks"


@pytest.fixture(scope="session")
def bench_dir() -> Path:
    """../shared/benchmarks relative to the project root (real GSM8K, MATH-500, ... files)."""
    if not BENCH_DIR.is_dir():
        pytest.skip(f"benchmark data not found at {BENCH_DIR}")
    return BENCH_DIR


@pytest.fixture(scope="module")
def pool():
    """A sandbox pool of 2 workers for one test module, closed afterwards."""
    from selfevolve.verifiers.sandbox import SandboxPool

    p = SandboxPool(max_workers=2)
    try:
        yield p
    finally:
        p.close()


def _corpus(n_transcripts: int = 300, seed: int = 0) -> list[str]:
    from selfevolve.embedded.transcripts import arith_transcripts

    return [m["content"] for _, t in arith_transcripts(n_transcripts, seed=seed) for m in t]


def build_tiny_model(path: Path, seed: int = 0, weight_std: float | None = None) -> Path:
    """Build the test model into ``path``; with ``weight_std`` redraw every weight matrix from
    N(0, weight_std) (see the module docstring). Returns ``path``."""
    from selfevolve.embedded.tinymodel import save_untrained

    save_untrained(path, _corpus(seed=seed), seed=seed)
    if weight_std is not None:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=g) * weight_std)
        model.save_pretrained(path)
    (path / ".complete").write_text("ok")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Directory of an untrained tiny Llama model with a chat template."""
    path = tmp_path_factory.getbasetemp() / "tiny-model"
    if not (path / ".complete").is_file():
        build_tiny_model(path)
    return path


@pytest.fixture(scope="session")
def varied_tiny_model_dir(tmp_path_factory) -> Path:
    """Directory of the tiny model with large random weights (prompt-sensitive greedy output)."""
    path = tmp_path_factory.getbasetemp() / "tiny-model-varied"
    if not (path / ".complete").is_file():
        build_tiny_model(path, weight_std=0.15)
    return path


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny-model generations on one intra-op thread, restoring the previous count.

    On 2-core machines other test processes run concurrently; OpenMP teams of 2 threads
    spin-waiting on oversubscribed cores make each tiny forward pass tens of times slower, while one
    thread loses nothing on a model this small. Use with ``pytestmark = pytest.mark.usefixtures(...)``.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
