from pathlib import Path

import pytest

from selfevolve.runtime_env import apply_defaults  # noqa: E402

apply_defaults()

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
