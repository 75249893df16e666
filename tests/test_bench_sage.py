"""The SAGE benchmark script's pure parts: --set overrides (schema-validated) and the result table."""

import importlib.util
from pathlib import Path

import pytest

from selfevolve.config import Params

_spec = importlib.util.spec_from_file_location("bench_sage", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sage.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_overrides_are_applied_and_validated():
    p = bench.apply_overrides(Params(), ["rl.select_p=1.0", "sage.ablation.critic=false", "rl.steps=5"])
    assert p.rl.select_p == 1.0 and p.sage.ablation.critic is False and p.rl.steps == 5
    for bad, msg in (["rl.nope=1"], "invalid params"), (["rl.select_p=7"], "invalid params"), (["rl"], "KEY=VALUE"), \
                     (["seed.x=1"], "not a section"):
        with pytest.raises(SystemExit, match=msg):
            bench.apply_overrides(Params(), bad)


def test_table_reports_accuracy_per_cycle_and_paired_p_values():
    base = [1] * 30 + [0] * 70
    better = [1] * 30 + [1] * 20 + [0] * 50
    results = {"base": base, "variants": {
        "full": {"cycles": {"c1": better}, "p_vs_base": {"c1": bench.mcnemar_exact(base, better)[0]}},
        "no_critic": {"cycles": {"c1": base}, "p_vs_base": {"c1": 1.0}, "p_full_vs_variant": bench.mcnemar_exact(base, better)[0]},
    }}
    table = bench.build_table(results, 1, 100, ["rl.select_p=1.0"])
    assert "`rl.select_p=1.0`" in table.splitlines()[0]
    full = next(line for line in table.splitlines() if line.startswith("| full |"))
    assert "| 0.300 | 0.500 | +0.200 | 1.91e-06 |" in full
    crit = next(line for line in table.splitlines() if line.startswith("| no_critic |"))
    assert crit.rstrip().endswith("| 1.91e-06 |")
