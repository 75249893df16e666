"""The same commit, params and machine give the same bytes: the first stages of a campaign run twice
in two folders produce identical files (model weights included) and identical metrics but for
wall-clock timings."""

from __future__ import annotations

import pytest

import benchmarks.bench_determinism as bench
from selfevolve.config import Params
from selfevolve.stages.registry import get
from selfevolve.stages.runner import execute


STAGES = [("seeds", None), ("bootstrap", None), ("evaluate_base", None), ("challenge", "c1"), ("critic_questions", "c1"),
          ("plan", "c1"), ("critic_plans", "c1"), ("solve", "c1"), ("verify", "c1"), ("rewards", "c1")]


def _params() -> Params:
    p = Params()
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size = 12, 300, 8
    p.bootstrap.probe_questions, p.bootstrap.frontier_k, p.bootstrap.extra_steps = 4, 2, 4
    p.seeds.size, p.seeds.heldout_size, p.seeds.val_size = 30, 6, 4
    p.sampling.max_new_tokens = p.evaluation.max_new_tokens = 32
    p.sage.questions_per_cycle, p.sage.pool_sample, p.sage.solver_samples = 8, 6, 2
    return p




@pytest.mark.slow
def test_two_runs_of_the_first_stages_give_identical_bytes(tmp_path):
    digests = []
    for name in ("a", "b"):
        root = tmp_path / name
        for stage, cycle in STAGES:
            execute(get(stage), _params(), cycle, root, track=False)
        digests.append(bench.digest(root))
    a, b = digests
    assert "models/base/model.safetensors" in a and "data/cycles/c1/attempts.jsonl" in a and "metrics/c1/solve.json" in a
    differ = bench.compare(a, b)
    assert not differ, f"differ between two identical runs: {differ}"
    # and the comparison is not blind: a changed byte is found
    b["models/base/model.safetensors"] = "0"
    assert bench.compare(a, b) == ["models/base/model.safetensors"]
