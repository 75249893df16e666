"""The compounding benchmark's statistics on synthetic outcomes: reach per cycle, McNemar against
the previous cycle on the unsupervised questions only, MASS on vs off beyond the first rung."""

import benchmarks.bench_compound as bench_compound
from selfevolve.records import MathSpec, Question


def _bench():
    return bench_compound


def _q(i, form, split):
    return Question(id=f"q{i}", domain="math", text=f"Compute {i}.", spec=MathSpec(answer="1"), form=form, split=split)


def test_compounding_reach_and_tests_against_the_previous_cycle():
    bench = _bench()
    qs = [_q(i, "3+3", "seed") for i in range(10)] + [_q(10 + i, "4+3", "frontier") for i in range(10)] + \
         [_q(20 + i, "4+4", "beyond") for i in range(10)]
    base = [1] * 10 + [1] * 3 + [0] * 7 + [0] * 10
    c1 = [1] * 10 + [1] * 10 + [1] * 2 + [0] * 8
    c2 = [0] * 10 + [1] * 10 + [1] * 8 + [0] * 2   # seed forms lost: not part of the unsupervised test
    results = {"splits": {"seed": list(range(10)), "frontier": list(range(10, 20)), "beyond": list(range(20, 30))},
               "base": base, "variants": {"full": {"cycles": {"c1": c1, "c2": c2}},
                                          "no_mass": {"cycles": {"c1": c1, "c2": c1}}}}
    rows = bench.compounding(results, qs)["full"]
    assert [r["cycle"] for r in rows] == ["base", "c1", "c2"]
    assert [r["reach_50"] for r in rows] == [0, 7, 8] and [r["reach_90"] for r in rows] == [0, 7, 7]
    assert rows[1]["up_vs_previous"] == 9 and rows[1]["down_vs_previous"] == 0 and rows[1]["p_vs_previous"] < 0.01
    assert rows[2]["up_vs_previous"] == 6 and rows[2]["down_vs_previous"] == 0  # the 10 seed-form losses are not counted
    cmp = bench.pairwise_last(results, qs, "full", "no_mass")
    assert cmp["n"] == 10 and cmp["full"] == 0.8 and cmp["no_mass"] == 0.2 and cmp["only_full"] == 6 and cmp["p"] < 0.05
    assert bench.pairwise_last(results, qs, "full", "control") is None
    text = bench.table({0: {"compounding": bench.compounding(results, qs), "pairwise": {"full_vs_no_mass": cmp}}})
    assert "| 0 | full | c2 | 0.000 | 1.000 | 0.800 | 8 | 7 |" in text and "full (single pass) vs no_mass" in text


def test_the_champion_workflow_is_compared_on_the_unsupervised_rungs_beyond_the_first():
    bench = _bench()
    qs = [_q(i, "3+3", "seed") for i in range(10)] + [_q(10 + i, "4+3", "frontier") for i in range(10)] + \
         [_q(20 + i, "5+4", "beyond") for i in range(10)]
    one_pass = [1] * 10 + [1] * 10 + [1] * 2 + [0] * 8
    results = {"variants": {"no_mass": {"cycles": {"c1": one_pass, "c2": one_pass}}}}
    # the champion's outcomes cover the unsupervised questions only (frontier, then beyond)
    champion = {"design_id": "d", "agents": ["splitter", "low", "high", "combiner"], "correct": [0] * 10 + [1] * 9 + [0]}
    cmp = bench.champion_vs(results, qs, champion, "no_mass")
    assert cmp["cycle"] == "c2" and cmp["n"] == 10 and cmp["champion"] == 0.9 and cmp["no_mass"] == 0.2
    assert cmp["only_champion"] == 7 and cmp["only_no_mass"] == 0 and cmp["p"] < 0.05  # the frontier's 10 losses not counted
    assert cmp["champion_rungs"] == {"4+3": 0.0, "5+4": 0.9} and cmp["reach"] == {"champion": [9, 9], "no_mass": [7, 7]}
    assert bench.champion_vs(results, qs, None, "no_mass") is None
    text = bench.table({0: {"compounding": {}, "pairwise": {"champion_vs_no_mass": cmp}}})
    assert "full's MASS champion (splitter->low->high->combiner) with its model vs no_mass (single pass)" in text
    assert text.endswith("reach 50 % / 90 %: 9/9 vs 7/7.")


def test_the_set_overrides_shape_the_base_the_cycles_start_from(tmp_path):
    """``--set`` reaches the base's params (the held-out ladder is drawn there), and a base built
    with other params is not silently reused."""
    import pytest
    import yaml

    from selfevolve.paths import cycle_paths
    from selfevolve.stages.registry import BASE_STAGES

    root = tmp_path / "seed1"
    for stage in BASE_STAGES:  # a finished base: nothing is run again
        path = cycle_paths("base", root).metrics(stage.metrics_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    ladder = "seeds.arith.reach_levels=[5, 6, 7, 8, 9, 10]"
    ppath = bench_compound.build_base(root, bench_compound.ROOT / "params.yaml", 1, print, [ladder])
    written = yaml.safe_load(ppath.read_text())
    assert written["seeds"]["arith"]["reach_levels"] == [5, 6, 7, 8, 9, 10] and written["seed"] == 1
    with pytest.raises(SystemExit, match="other params"):
        bench_compound.build_base(root, bench_compound.ROOT / "params.yaml", 1, print)
