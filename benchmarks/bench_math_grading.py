"""Throughput of the protected math grader against plain in-process math-verify.

Grades the same N (gold answer, gold solution text) pairs from GSM8K test and MATH-500 with

1. plain ``verify(parse(gold), parse(prediction))`` in this process (math-verify's default
   signal-based timeouts; no protection against hangs that hold the GIL, main thread only), and
2. ``grade_math_batch`` (answer extraction + normalisation + math-verify in worker processes,
   wall-clock limits enforced by the parent): steady state (warm pool, its answer cache disabled)
   and cold (a new pool, startup included), against plain in a fresh interpreter (import included).

and prints timings, the ratio protected/plain (goal: <= 1.5 warm) and the agreement of the two.

Usage: ``python benchmarks/bench_math_grading.py [--n 1000] [--data-dir ../shared/benchmarks] [--workers 0] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="pairs to grade (half GSM8K test, half MATH-500)")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "benchmarks"))
    ap.add_argument("--workers", type=int, default=0, help="grading processes (0 = one per core)")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-item limit for grade_math_batch (s)")
    ap.add_argument("--repeats", type=int, default=3, help="alternating plain/protected runs (medians are reported)")
    args = ap.parse_args()

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import parse, verify

    from selfevolve.questions.benchmarks import load_benchmark
    from selfevolve.verifiers.math import _cpu_count, grade_math_batch, shutdown_pool

    half = args.n // 2
    gsm = load_benchmark("gsm8k", data_dir=args.data_dir, limit=args.n - min(half, 500))
    m500 = load_benchmark("math500", data_dir=args.data_dir, limit=min(half, 500))
    pairs = [(q.answer, q.meta["solution"]) for q in gsm + m500]
    warm_items = [(q.answer, ", ".join(q.meta["final_answer"])) for q in load_benchmark("olympiadbench", data_dir=args.data_dir, limit=64)]
    workers = args.workers or _cpu_count()
    print(f"pairs: {len(pairs)} ({len(gsm)} GSM8K test + {len(m500)} MATH-500), workers: {workers}, cores: {os.cpu_count()}")

    # Steady state for both: the grader's per-worker answer cache is disabled (it would hold the
    # timed pairs), one untimed pass warms math-verify (imports, ANTLR DFA) in this process and in
    # the workers, then plain and protected runs alternate --repeats times so that load from other
    # processes hits both alike.
    os.environ["SELFEVOLVE_MATH_PARSE_CACHE"] = "0"
    shutdown_pool()
    t0 = time.perf_counter()
    grade_math_batch(warm_items[:1], timeout_s=args.timeout, workers=args.workers)
    t_start = time.perf_counter() - t0
    grade_math_batch(pairs, timeout_s=args.timeout, workers=args.workers)
    for g, p in pairs:
        verify(parse(f"${g}$"), parse(p))
    plain_times, warm_times = [], []
    for rep in range(args.repeats):
        t0 = time.perf_counter()
        plain = [verify(parse(f"${g}$"), parse(p)) for g, p in pairs]
        plain_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        grades = grade_math_batch(pairs, timeout_s=args.timeout, workers=args.workers)
        warm_times.append(time.perf_counter() - t0)
        print(f"  repeat {rep + 1}: plain {plain_times[-1]:.2f} s, protected {warm_times[-1]:.2f} s, "
              f"ratio {warm_times[-1] / plain_times[-1]:.2f}x")
    # protected, cold: a new pool (zygote import + warm-up + forks) on the pairs, default cache
    shutdown_pool()
    os.environ.pop("SELFEVOLVE_MATH_PARSE_CACHE")
    t0 = time.perf_counter()
    grade_math_batch(pairs, timeout_s=args.timeout, workers=args.workers)
    t_cold = time.perf_counter() - t0
    shutdown_pool()
    t_plain, t_warm = statistics.median(plain_times), statistics.median(warm_times)
    # plain, cold: a fresh interpreter imports math-verify and makes the first pass (timed inside)
    import json
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(pairs, fh)
    code = (
        "import json, logging, sys, time\n"
        "pairs = json.load(open(sys.argv[1]))\n"
        "t0 = time.perf_counter()\n"
        "from math_verify import parse, verify\n"
        "logging.getLogger('math_verify').setLevel(logging.ERROR)\n"
        "[verify(parse(f'${g}$'), parse(p)) for g, p in pairs]\n"
        "print(time.perf_counter() - t0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, fh.name], capture_output=True, text=True, check=True)
    os.unlink(fh.name)
    t_plain_cold = float(out.stdout.strip().splitlines()[-1])

    ours = [g.correct for g in grades]
    agree = sum(a == b for a, b in zip(plain, ours))
    print(f"medians of {args.repeats}:")
    print(f"plain verify(parse(gold), parse(pred)), in-process: {t_plain:6.2f} s  ({1000 * t_plain / len(pairs):.2f} ms/pair)  correct {sum(plain)}/{len(pairs)}")
    print(f"grade_math_batch, warm pool, no answer cache:      {t_warm:6.2f} s  ({1000 * t_warm / len(pairs):.2f} ms/pair)  correct {sum(ours)}/{len(pairs)}")
    print(f"plain, cold (fresh interpreter, import included):   {t_plain_cold:6.2f} s")
    print(f"grade_math_batch, cold (new pool, start included): {t_cold:6.2f} s  (pool start alone ~{t_start:.2f} s)")
    print(f"ratio protected/plain: steady state {t_warm / t_plain:.2f}x, cold {t_cold / t_plain_cold:.2f}x (goal <= 1.5x)")
    print(f"agreement with plain math-verify: {agree}/{len(pairs)}; statuses: "
          + ", ".join(f"{s}={sum(g.status == s for g in grades)}" for s in ("correct", "wrong", "no_answer", "timeout", "error")))


if __name__ == "__main__":
    main()
