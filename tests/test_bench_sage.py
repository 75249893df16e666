"""The SAGE benchmark script's pure parts: --set overrides (schema-validated) and the result table."""

import pytest

import benchmarks.bench_sage as bench


def test_overrides_are_applied_and_validated():
    p = bench.apply_overrides(None, ["rl.select_p=1.0", "sage.ablation.critic=false", "rl.steps=5"])
    assert p.rl.select_p == 1.0 and p.sage.ablation.critic is False and p.rl.steps == 5
    for bad, msg in (["rl.nope=1"], "invalid params"), (["rl.select_p=7"], "invalid params"), (["rl"], "KEY=VALUE"), \
                     (["seed.x=1"], "not a section"):
        with pytest.raises(SystemExit, match=msg):
            bench.apply_overrides(None, bad)


def test_table_reports_accuracy_per_split_and_cycle_with_paired_p_values():
    base = [1] * 30 + [0] * 70 + [1] * 50
    better = [1] * 30 + [1] * 20 + [0] * 50 + [1] * 50
    splits = {"frontier": list(range(100)), "seed": list(range(100, 150))}

    def p(a, b, idx):
        return bench.mcnemar_exact([a[i] for i in idx], [b[i] for i in idx])[0]

    results = {"base": base, "splits": splits, "variants": {
        "full": {"cycles": {"c1": better}, "p_vs_base": {s: {"c1": p(base, better, idx)} for s, idx in splits.items()}},
        "control": {"cycles": {"c1": base}, "p_vs_base": {s: {"c1": 1.0} for s in splits},
                    "p_full_vs_variant": {s: p(base, better, idx) for s, idx in splits.items()}},
    }}
    table = bench.build_table(results, 1, ["rl.select_p=1.0"])
    assert "`rl.select_p=1.0`" in table.splitlines()[0] and "100 frontier, 50 seed" in table.splitlines()[0]
    full = next(line for line in table.splitlines() if line.startswith("| full | frontier |"))
    assert "| 0.300 | 0.500 | +0.200 | 1.91e-06 |" in full
    assert "| full | seed | 1.000 | 1.000 | +0.000 | 1 |" in table
    control = next(line for line in table.splitlines() if line.startswith("| control | frontier |"))
    assert control.rstrip().endswith("| 1.91e-06 |")


def test_variants_are_valid_params_and_the_control_trains_on_seed_data_only():
    for name, overrides in bench.VARIANTS.items():
        params = bench.apply_overrides(None, [f"{k}={str(v).lower()}" for k, v in overrides.items()])
        if name == "control":
            assert params.sage.ablation.train_solver is False and params.rl.other_roles_fraction == 0.0


def test_a_run_extended_by_more_cycles_resumes_and_one_with_other_params_starts_afresh(tmp_path):
    base = tmp_path / "base"
    (base / "models" / "base").mkdir(parents=True)
    (base / "data" / "cycles" / "base").mkdir(parents=True)
    (base / "data" / "cycles" / "base" / "pool.jsonl").write_text("{}\n")
    eval_dir, vroot = tmp_path / "eval", tmp_path / "variants" / "full"
    params = bench.apply_overrides(None, [])
    bench.prepare_variant(base, vroot, params, "full", 4, True, eval_dir)
    finished = vroot / "metrics" / "c4" / "train_rl.json"
    finished.parent.mkdir(parents=True)
    finished.write_text("{}")
    eval_dir.mkdir()
    (eval_dir / "full-c4.json").write_text("{}")

    ppath = bench.prepare_variant(base, vroot, params, "full", 6, True, eval_dir)
    assert finished.exists() and (eval_dir / "full-c4.json").exists()
    assert "c6:" in ppath.read_text()

    bench.prepare_variant(base, vroot, bench.apply_overrides(None, ["rl.steps=7"]), "full", 6, True, eval_dir)
    assert not finished.exists() and not (eval_dir / "full-c4.json").exists()
