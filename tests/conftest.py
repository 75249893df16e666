import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# torch's OpenMP threads spin while waiting; on 2 shared cores that made generation 10-70x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT.parent / "shared" / "benchmarks"


@pytest.fixture(scope="session")
def bench_dir() -> Path:
    """../shared/benchmarks relative to the project root (real GSM8K, MATH-500, ... files)."""
    if not BENCH_DIR.is_dir():
        pytest.skip(f"benchmark data not found at {BENCH_DIR}")
    return BENCH_DIR
