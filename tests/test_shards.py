"""Sharded rollouts and grading: a stage split into N shards on different workers joins back into
the very bytes the unsharded stage writes; the shard and merge stages exist in dvc.yaml and in the
campaign's run list with the right upstream; placement puts each stage on its pool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from selfevolve.config import Params
from selfevolve.questions import arith
from selfevolve.records import write_jsonl
from selfevolve.stages import placement
from selfevolve.stages.registry import get
from selfevolve.stages.runner import execute
from selfevolve.stages.shards import Shard, merge_parts, part_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("n_units, count", [(10, 3), (3, 3), (2, 4), (0, 2), (64, 1)])
def test_shards_cover_the_units_in_order_once(n_units, count):
    ranges = [Shard(k, count).take(n_units) for k in range(count)]
    assert [u for r in ranges for u in r] == list(range(n_units))
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


@pytest.mark.parametrize("spec", ["2/2", "-1/2", "1", "a/b", "", "0/0"])
def test_a_bad_shard_spec_is_an_error_naming_the_form(spec):
    with pytest.raises(ValueError, match="K/N|index < count"):
        Shard.parse(spec)


def test_merging_with_a_part_missing_names_it(tmp_path):
    out = tmp_path / "attempts.jsonl"
    write_jsonl(part_path(out, 0, 2), [{"a": 1}])
    with pytest.raises(FileNotFoundError, match=r"attempts\.1-of-2\.jsonl"):
        merge_parts(out, 2)
    assert not out.exists()


@pytest.fixture(scope="module")
def cycle_dir(tmp_path_factory, varied_tiny_model_dir):
    """A cycle with a solve set of 11 questions, no plans, ready for the solve stage."""
    root = tmp_path_factory.mktemp("shards")
    c1 = root / "data" / "cycles" / "c1"
    write_jsonl(c1 / "solve_set.jsonl", arith.generate(11, seed=3, prefix="q"))
    write_jsonl(c1 / "plans.jsonl", [])
    write_jsonl(c1 / "critic_plans.jsonl", [])
    params = Params.model_validate({
        "model": {"base": str(varied_tiny_model_dir)},
        "sampling": {"temperature": 1.0, "max_new_tokens": 12},
        "sage": {"solver_samples": 2, "rollout_block": 3},
    })
    return root, params


def _run(stage: str, root: Path, params: Params, shards: int) -> bytes:
    st = get(stage)
    out = root / "data" / "cycles" / "c1" / ("attempts.jsonl" if stage == "solve" else "verdicts.jsonl")
    out.unlink(missing_ok=True)
    if shards == 1:
        execute(st, params, "c1", root, track=False)
    else:
        for k in range(shards):
            execute(st, params, "c1", root, track=False, shard=Shard(k, shards))
        execute(st, params, "c1", root, track=False, merge=shards)
    return out.read_bytes()


def test_sharded_rollouts_and_grading_give_the_unsharded_bytes(cycle_dir):
    """Sampling at temperature 1 (every sample random): 1, 2 and 3 shards of the Solver (4 seeded
    blocks of 3 questions) and of the Verifier write the same attempts and verdicts, byte for byte."""
    root, params = cycle_dir
    attempts = {n: _run("solve", root, params, n) for n in (1, 3, 2)}
    assert attempts[1].count(b"\n") == 22 and len({*attempts.values()}) == 1
    verdicts = {n: _run("verify", root, params, n) for n in (1, 2, 4)}
    assert verdicts[1].count(b"\n") == 22 and len({*verdicts.values()}) == 1
    # the samples really are random: another seed gives other bytes
    other = params.model_copy(update={"seed": 1})
    assert _run("solve", root, other, 1) != attempts[1]


def test_the_shard_runs_and_merge_are_dag_stages_with_their_upstream():
    params = Params.model_validate({"placement": {"shards": {"solve": 2, "verify": 3}}})
    runs = {r.id: r for r in placement.stage_runs(params, ["c1"])}
    assert runs["solve_shard_1@c1"].upstream == ("bootstrap", "critic_plans@c1", "plan@c1")
    assert runs["solve@c1"].upstream == ("solve_shard_0@c1", "solve_shard_1@c1")
    assert runs["solve_shard_0@c1"].outs == ("data/cycles/c1/shards/attempts.0-of-2.jsonl",)
    assert runs["verify_shard_2@c1"].upstream == ("plan@c1", "solve@c1")
    assert runs["rewards@c1"].upstream[-1] == "verify@c1" and "verify_shard_0@c1" not in runs["rewards@c1"].upstream
    assert "mass_search@c1" in runs["datasets@c1"].upstream  # its dep is a file inside the search's output folder
    assert {"train_sft@c1", "mass_search@c1", "evaluate_base"} <= set(runs["evaluate@c1"].upstream)
    order = list(runs)
    assert all(order.index(u) < order.index(r) for r in runs for u in runs[r].upstream)

def test_a_stage_that_cannot_split_is_refused_in_params(tmp_path):
    from selfevolve.config import ParamsError, load_params

    (tmp_path / "params.yaml").write_text("placement:\n  shards: {rewards: 2}\n")
    with pytest.raises(ParamsError, match="placement.shards"):
        load_params(tmp_path / "params.yaml")


def test_dvc_knows_the_generated_shard_stages(tmp_path):
    """dvc.yaml rendered with 2 Solver shards: DVC lists the shard stages and the merge per cycle."""
    from selfevolve.stages.dvc_yaml import render

    (tmp_path / "dvc.yaml").write_text(render({"solve": 2}))
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    listed = subprocess.run([sys.executable, "-m", "dvc", "stage", "list", "--name-only"], cwd=tmp_path, capture_output=True,
                            text=True, check=True).stdout.split()
    assert {"solve_shard_0@c1", "solve_shard_1@c2", "solve@c1"} <= set(listed) and "verify_shard_0@c1" not in listed


@pytest.mark.parametrize("model, stage, pool", [
    ({}, "solve", "gpu"), ({}, "verify", "cpu"), ({}, "train_rl", "gpu"), ({"backend": "openai"}, "solve", "cpu"),
    ({"device": "cpu"}, "evaluate", "cpu"), ({"backend": "vllm"}, "rewards", "cpu"),
])
def test_each_stage_goes_to_the_pool_of_its_resource_class(model, stage, pool):
    params = Params.model_validate({"model": model, "placement": {"pools": {"gpu": "a100", "cpu": "cpu"}}})
    run = next(r for r in placement.stage_runs(params, ["c1"]) if r.stage.name == stage)
    assert placement.pool_of(run, params) == {"gpu": "a100", "cpu": "cpu"}[pool]


def test_resources_override_and_merges_run_on_cpu():
    params = Params.model_validate({"placement": {"resources": {"verify": "gpu"}, "shards": {"solve": 2}}})
    runs = {r.id: r for r in placement.stage_runs(params, ["c1"])}
    assert placement.pool_of(runs["verify@c1"], params) == "gpu" and placement.pool_of(runs["solve@c1"], params) == "cpu"
    assert placement.pool_of(runs["solve_shard_0@c1"], params) == "gpu"
    with pytest.raises(ValueError, match="unknown stage"):
        placement.check_resources(Params.model_validate({"placement": {"resources": {"solver": "gpu"}}}))


@pytest.mark.slow
def test_the_cli_refuses_shards_of_a_stage_that_cannot_split(tmp_path):
    r = subprocess.run([str(Path(sys.executable).parent / "selfevolve"), "rewards", "--cycle", "c1", "--shard", "0/2", "--params",
                        str(ROOT / "params.yaml"), "--root", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "cannot be sharded" in r.stderr + r.stdout
