"""Throughput of the protected math grader against plain in-process math-verify.

Grades the same N (gold answer, gold solution text) pairs from GSM8K test and MATH-500 with

1. plain ``verify(parse(gold), parse(prediction))`` in this process (math-verify's default
   signal-based timeouts; no protection against hangs that hold the GIL, main thread only), and
2. ``grade_math_batch`` (answer extraction + normalisation + math-verify in worker processes,
   wall-clock limits enforced by the parent), with a warm pool (workers started on other items
   first) and cold (pool startup included).

and prints timings, the ratio protected/plain (goal: <= 1.5 warm) and the agreement of the two.

Usage: ``python benchmarks/bench_math_grading.py [--n 1000] [--data-dir ../shared/benchmarks] [--workers 0]``
"""

from __future__ import annotations

import argparse
import logging
import os
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
    args = ap.parse_args()

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import parse, verify

    from selfevolve.evaluation.benchmarks import load_benchmark
    from selfevolve.verifiers.math import _cpu_count, grade_math_batch, shutdown_pool

    half = args.n // 2
    gsm = load_benchmark("gsm8k", data_dir=args.data_dir, limit=args.n - min(half, 500))
    m500 = load_benchmark("math500", data_dir=args.data_dir, limit=min(half, 500))
    pairs = [(q.answer, q.meta["solution"]) for q in gsm + m500]
    warm_items = [(q.answer, ", ".join(q.meta["final_answer"])) for q in load_benchmark("olympiadbench", data_dir=args.data_dir, limit=64)]
    workers = args.workers or _cpu_count()
    print(f"pairs: {len(pairs)} ({len(gsm)} GSM8K test + {len(m500)} MATH-500), workers: {workers}, cores: {os.cpu_count()}")

    # 1. plain in-process math-verify (warm: imported and one call made before timing)
    verify(parse("$1$"), parse("\\boxed{1}"))
    t0 = time.perf_counter()
    plain = [verify(parse(f"${g}$"), parse(p)) for g, p in pairs]
    t_plain = time.perf_counter() - t0

    # 2a. protected, cold: pool startup included
    shutdown_pool()
    t0 = time.perf_counter()
    grade_math_batch(warm_items[:1], timeout_s=args.timeout, workers=args.workers)
    t_start = time.perf_counter() - t0
    # 2b. protected, warm pool (its parse caches hold none of the timed pairs)
    grade_math_batch(warm_items, timeout_s=args.timeout, workers=args.workers)
    t0 = time.perf_counter()
    grades = grade_math_batch(pairs, timeout_s=args.timeout, workers=args.workers)
    t_warm = time.perf_counter() - t0
    shutdown_pool()
    t0 = time.perf_counter()
    grade_math_batch(pairs, timeout_s=args.timeout, workers=args.workers)
    t_cold = time.perf_counter() - t0
    shutdown_pool()

    ours = [g.correct for g in grades]
    agree = sum(a == b for a, b in zip(plain, ours))
    print(f"plain verify(parse(gold), parse(pred)), in-process: {t_plain:6.2f} s  ({1000 * t_plain / len(pairs):.2f} ms/pair)  correct {sum(plain)}/{len(pairs)}")
    print(f"grade_math_batch, warm pool:                       {t_warm:6.2f} s  ({1000 * t_warm / len(pairs):.2f} ms/pair)  correct {sum(ours)}/{len(pairs)}")
    print(f"grade_math_batch, cold (incl. pool start):         {t_cold:6.2f} s  (pool start alone ~{t_start:.2f} s)")
    print(f"ratio protected/plain: warm {t_warm / t_plain:.2f}x, cold {t_cold / t_plain:.2f}x (goal <= 1.5x)")
    print(f"agreement with plain math-verify: {agree}/{len(pairs)}; statuses: "
          + ", ".join(f"{s}={sum(g.status == s for g in grades)}" for s in ("correct", "wrong", "no_answer", "timeout", "error")))


if __name__ == "__main__":
    main()
