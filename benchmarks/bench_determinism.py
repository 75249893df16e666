"""Benchmark: a whole campaign run twice gives the same bytes.

Runs every stage of the registry (seed set, bootstrap, base evaluation, then each cycle's stages)
twice, in two fresh folders, with the same params (``params.yaml`` of ``--root``, plus ``--set``
overrides), untracked, exactly as ``dvc repro`` runs them (``selfevolve.stages.runner.execute``),
then compares every output file by SHA-256: model weights, JSONL records, metrics (without the
wall-clock timings ``stage_seconds``/``seconds``/``runtime_s``). Prints one line per output that
differs, and a summary with the wall time of each run.

What makes it hold on the CPU: every random choice is seeded from ``(params.seed, cycle, purpose)``
(``selfevolve.seeding``), the training data order and model initialisation are seeded, generation is
seeded per batch, grading is deterministic, and torch's CPU kernels give the same results for the
same thread count (keep ``OMP_NUM_THREADS`` / ``torch.set_num_threads`` the same for both runs; a
GPU's atomics-based kernels would not).

    .venv/bin/python benchmarks/bench_determinism.py                         # the default 2-cycle campaign (~40 min)
    .venv/bin/python benchmarks/bench_determinism.py --set bootstrap.steps=200 --set bootstrap.extra_rounds=0 \
        --set rl.steps=30   # quicker (~15 min on 2 cores; without extra_rounds=0 the warm start's probe
                            # fails at 200 steps and four practice rounds of 600 steps follow)
    .venv/bin/python benchmarks/bench_determinism.py --against ../before/reports/determinism/run-a
                            # one run here, compared with a run of another checkout (before and after a
                            # change that should not change any output); same params and overrides
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from selfevolve import runtime_env  # noqa: E402

runtime_env.apply_defaults()

#: Metric keys that measure wall-clock time (the only values allowed to differ).
TIMINGS = frozenset({"stage_seconds", "seconds", "runtime_s"})


def digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (paths relative to it), MLflow's store excluded; JSON
    metrics files (``metrics/*/*.json``, ``bootstrap.json``, ``rl.json``) are hashed without their
    timing keys."""
    out = {}
    for f in sorted(root.rglob("*")):
        if not f.is_file() or "mlflow" in f.relative_to(root).parts:
            continue
        rel = f.relative_to(root).as_posix()
        if f.suffix == ".json" and (f.parent.parent.name == "metrics" or f.name in ("bootstrap.json", "rl.json")):
            data = json.loads(f.read_text())
            if isinstance(data, dict):
                data = {k: v for k, v in data.items() if k not in TIMINGS}
            out[rel] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        else:
            out[rel] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def run_campaign(root: Path, params, log=print) -> float:
    """Every registered stage for every cycle of ``params``, untracked, in ``root``; returns seconds."""
    from selfevolve.stages.registry import BASE_STAGES, CYCLE_STAGES
    from selfevolve.stages.runner import execute

    t0 = time.time()
    # cycle by cycle, as the DAG orders them: a cycle's stages read the cycle it starts from
    order = [(s, None) for s in BASE_STAGES] + [(s, c) for c in params.cycle_names() for s in CYCLE_STAGES]
    for stage, cycle in order:
        t = time.time()
        execute(stage, params, cycle, root, track=False)
        log(f"  {root.name} {stage.name}{'@' + cycle if cycle else ''}: {time.time() - t:.0f}s")
    return time.time() - t0


def compare(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Outputs present in only one run or with different contents, sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--root", type=Path, default=ROOT, help="project whose params.yaml is used")
    ap.add_argument("--out", type=Path, default=None, help="work folder (default <root>/reports/determinism)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a param (YAML value; repeatable)")
    ap.add_argument("--against", type=Path, default=None, metavar="RUN_DIR",
                    help="run once and compare with this run folder of another checkout (its reports/determinism/run-a)")
    args = ap.parse_args(argv)

    import shutil

    from selfevolve.config import load_params
    from selfevolve.inputs import InputError, parse_assignments

    try:
        params = load_params(args.root / "params.yaml", overrides=parse_assignments(args.set))
    except InputError as exc:
        raise SystemExit(str(exc)) from None
    data_dir = Path(params.seeds.data_dir)
    if not data_dir.is_absolute():
        params.seeds.data_dir = str((args.root / data_dir).resolve())
    if args.against is not None and not args.against.is_dir():
        raise SystemExit(f"--against {args.against}: no such run folder (run this benchmark in the other checkout first)")
    out = (args.out or args.root / "reports" / "determinism").resolve()
    seconds, digests = [], []
    for name in ("run-a",) if args.against else ("run-a", "run-b"):
        root = out / name
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        seconds.append(run_campaign(root, params))
        digests.append(digest(root))
    if args.against:
        digests.append(digest(args.against.resolve()))
    differ = compare(*digests)
    for k in differ:
        print(f"DIFFERS: {k}")
    against = f" (against {args.against})" if args.against else ""
    print(f"{len(digests[0])} outputs compared{against}; {len(differ)} differ; "
          f"run{'s' * (len(seconds) > 1)} took {' and '.join(f'{t:.0f} s' for t in seconds)}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
