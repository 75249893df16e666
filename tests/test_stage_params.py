"""Every params field a stage reads is one of the stage's DVC params (the registry's ``params``).

DVC reruns a stage when a value it tracks changed. The params schema (``selfevolve/config.py``) is
not a code dependency of the stages (``stages/dvc_yaml.PLUMBING``): what a stage reads must be in
its ``params`` lists, or editing that value in params.yaml would leave the stage's old output in
place. This test runs the base stages and one cycle at the end-to-end tests' sizes in-process and
records each field read on the params object, stage by stage."""

from __future__ import annotations

import contextlib

import pytest
import yaml

from helpers import ROOT, SMALL, _merge
from selfevolve.config import Params, _Section, validate_params
from selfevolve.stages.registry import STAGES
from selfevolve.stages.runner import execute

#: Fields that shape the DAG rather than a stage's outputs: ``cycles`` is the chain of cycles
#: (dvc.yaml is generated from it, so a change there changes the stages' dependencies themselves).
STRUCTURE = ("cycles",)


@contextlib.contextmanager
def record_reads(params: Params):
    """Yield a set that fills with the dotted path of every non-section field read on ``params``
    (``sage.alpha``; an item of a list or mapping of sections counts as its container's field)."""
    paths: dict[int, str] = {}

    def walk(node, path: str) -> None:  # path: "sage." for a section; "evaluation.benchmarks|" for a listed item
        paths[id(node)] = path
        for name in type(node).model_fields:
            value = node.__dict__.get(name)
            if isinstance(value, _Section):
                walk(value, f"{path}{name}.")
                continue
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
            for child in items:
                if isinstance(child, _Section):
                    paths[id(child)] = f"{path}{name}|"

    walk(params, "")
    reads: set[str] = set()
    plain = object.__getattribute__

    def traced(self, name):
        value = plain(self, name)
        if name in type(self).model_fields and not isinstance(value, _Section):
            where = paths.get(id(self), f"?{type(self).__name__}.")
            reads.add(where[:-1] if where.endswith("|") else where + name)
        return value

    _Section.__getattribute__ = traced
    try:
        yield reads
    finally:
        del _Section.__getattribute__


def uncovered(reads: set[str], declared: tuple[str, ...]) -> list[str]:
    """The reads no declared params key covers (a key covers itself and every field under it)."""
    return sorted(r for r in reads if r.split(".")[0] not in STRUCTURE
                  and not any(r == d or r.startswith(d + ".") for d in declared))


@pytest.fixture(scope="module")
def reads_per_stage(tmp_path_factory) -> dict[str, set[str]]:
    small = _merge(SMALL, {"sage": {"alpha": 0.0, "beta": 0.0}, "rl": {"skip_no_spread": False}})
    params = validate_params(_merge(yaml.safe_load((ROOT / "params.yaml").read_text()), small))
    root = tmp_path_factory.mktemp("stage-params")
    out = {}
    for stage in STAGES:
        with record_reads(params) as reads:
            execute(stage, params, "c1" if stage.per_cycle else None, root, track=False)
        out[stage.name] = reads
    return out


def test_every_field_a_stage_reads_is_one_of_its_dvc_params(reads_per_stage):
    missing = {s.name: uncovered(reads_per_stage[s.name], s.params) for s in STAGES}
    assert not {k: v for k, v in missing.items() if v}, f"fields read but not in the stage's params (registry.py): {missing}"
    # the trace is not blind: the stages read the fields that decide what they write
    assert {"sage.edge_share", "sage.questions_per_cycle", "sampling.temperature"} <= reads_per_stage["challenge"]
    assert {"bootstrap.steps", "seed"} <= reads_per_stage["bootstrap"]
    assert "evaluation.benchmarks" in reads_per_stage["evaluate"]
    assert uncovered(reads_per_stage["challenge"], ("seed", "sampling", "model", "seeds.set", "verifiers")) == [
        "sage.edge_share", "sage.frontier_band", "sage.frontier_boost", "sage.questions_per_cycle"]


def test_the_recorder_names_nested_and_listed_fields():
    params = Params()
    with record_reads(params) as reads:
        _ = params.sage.alpha, params.model.lora.r, params.evaluation.benchmarks[0].limit, params.cycles["c1"].init
        _ = params.sage  # a section itself is not a value
    assert reads == {"sage.alpha", "model.lora.r", "evaluation.benchmarks", "cycles"}
    assert uncovered(reads, ("sage", "model.lora.r")) == ["evaluation.benchmarks"]
