"""Benchmark: MASS champion vs the single-agent seed on held-out arith questions.

Runs the workflow search (``selfevolve.mass.search.run_search``) on a search pool, then evaluates
the champion and the single-agent seed (the MASS "no-harness" reference) greedily on disjoint
held-out questions, and prints accuracy, mean output tokens per question and accuracy per 1,000
output tokens (the reference's "performance per output token"), with the champion/single ratios.

    .venv/bin/python benchmarks/bench_mass.py --model models/base
    .venv/bin/python benchmarks/bench_mass.py --tiny          # untrained tiny model: a smoke run

The last line is a JSON object with every number (for scripts).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_tiny(path: Path) -> Path:
    from selfevolve.embedded.transcripts import arith_transcripts
    from selfevolve.embedded.tinymodel import save_untrained

    corpus = [m["content"] for _, t in arith_transcripts(300, seed=0) for m in t]
    return save_untrained(path, corpus)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model directory (or hub id) served by HFBackend")
    src.add_argument("--tiny", action="store_true", help="build an untrained tiny model in a temp dir (smoke run)")
    ap.add_argument("--search-questions", type=int, default=48, help="pool for the search: fitness sample + confirmation sample")
    ap.add_argument("--eval-questions", type=int, default=16, help="fitness sample per design during the search")
    ap.add_argument("--confirm-questions", type=int, default=32, help="held-out check of the champion (0 = off)")
    ap.add_argument("--heldout", type=int, default=128)
    ap.add_argument("--levels", default="1,2,3", help="arith levels, comma-separated")
    ap.add_argument("--generations", type=int, default=2)
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--cost-weight", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--max-model-len", type=int, default=1024, help="the default params.yaml window (model.max_model_len)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from selfevolve.backends.base import SamplingConfig
    from selfevolve.backends.hf import HFBackend
    from selfevolve.config import MassParams
    from selfevolve.mass.benchmark import champion_vs_single_agent, format_table
    from selfevolve.mass.search import run_search
    from selfevolve.questions import arith

    tmp = None
    model = args.model
    if args.tiny:
        tmp = tempfile.TemporaryDirectory(prefix="bench-mass-")
        model = str(build_tiny(Path(tmp.name) / "tiny"))
    levels = tuple(int(x) for x in args.levels.split(","))
    pool = arith.generate(args.search_questions, seed=args.seed, levels=levels, prefix="search")
    seen = {q.text for q in pool}
    held = [q for q in arith.generate(args.heldout * 2, seed=args.seed + 10_000, levels=levels, prefix="heldout")
            if q.text not in seen][: args.heldout]
    from selfevolve.config import VerifierParams
    from selfevolve.verifiers.grading import verify_fn

    verify = verify_fn(VerifierParams())
    backend = HFBackend(model, device=args.device, max_model_len=args.max_model_len)
    max_len = min(args.max_model_len, backend.max_model_len)
    params = MassParams(generations=args.generations, population=args.population, eval_questions=args.eval_questions,
                        confirm_questions=args.confirm_questions,
                        cost_weight=args.cost_weight)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)

    t0 = time.time()
    result = run_search(backend, pool, params, verify, seed=args.seed, sampling=sampling, max_model_len=max_len,
                        log=lambda m: print(m, flush=True))
    search_s = time.time() - t0
    t1 = time.time()
    table, _ = champion_vs_single_agent(backend, result.champions, held, params, verify, max_model_len=max_len,
                                        max_new_tokens=args.max_new_tokens, seed=args.seed)
    eval_s = time.time() - t1
    rows = table["math"]
    print(f"\nmodel {model}  search: {len(pool)} questions, {args.generations} generations x {args.population}, "
          f"{len(result.evaluated)} designs, {search_s:.1f}s   held-out: {len(held)} questions, {eval_s:.1f}s")
    print(format_table(table))
    ratios = rows["ratios"]
    print("champion / single_agent: " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.2f}x'}" for k, v in ratios.items()))
    summary = {"model": model, "search_s": round(search_s, 2), "eval_s": round(eval_s, 2), "heldout": len(held),
               "designs_evaluated": len(result.evaluated), "rows": {k: rows[k] for k in ("single_agent", "champion")},
               "ratios": ratios, "confirmation": result.confirmation,
               "model_proposals_accepted": sum(h.get("model_accepted", 0) for h in result.history)}
    print(json.dumps(summary))
    backend.close()
    if tmp is not None:
        tmp.cleanup()
    return summary


if __name__ == "__main__":
    main()
