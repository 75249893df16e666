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
    p.bootstrap.steps, p.bootstrap.transcripts, p.bootstrap.batch_size, p.bootstrap.split_steps = 12, 300, 8, 4
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


def test_against_compares_one_run_with_another_checkouts_run(tmp_path, monkeypatch, capsys):
    """``--against RUN_DIR`` runs once and compares with a run folder made elsewhere: equal outputs
    pass, a changed or missing output fails and is named, a missing folder is a clear error."""
    def fake_run(root, params, log=print):
        (root / "metrics" / "c1").mkdir(parents=True)
        (root / "metrics" / "c1" / "solve.json").write_text('{"accuracy": 0.5, "stage_seconds": 3.0}')
        (root / "model.bin").write_bytes(b"weights")
        return 1.0

    monkeypatch.setattr(bench, "run_campaign", fake_run)
    other = tmp_path / "other" / "run-a"
    other.mkdir(parents=True)
    fake_run(other, None)
    (other / "metrics" / "c1" / "solve.json").write_text('{"accuracy": 0.5, "stage_seconds": 9.0}')  # timings may differ
    assert bench.main(["--out", str(tmp_path / "here"), "--against", str(other)]) == 0
    assert "2 outputs compared (against" in capsys.readouterr().out
    assert not (tmp_path / "here" / "run-b").exists()
    (other / "model.bin").write_bytes(b"other weights")
    assert bench.main(["--out", str(tmp_path / "here"), "--against", str(other)]) == 1
    assert "DIFFERS: model.bin" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no such run folder"):
        bench.main(["--out", str(tmp_path / "here"), "--against", str(tmp_path / "missing")])

