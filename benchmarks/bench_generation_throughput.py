"""Generation throughput of the transformers backend: batched vs one prompt at a time, and the
shared-prefix cache on vs off.

Generates greedily for the same prompts (role prompts rendered from the arithmetic seed
generator, of varied lengths; with ``--worked-examples`` each starts with the arith worked
exchange, as the ``smollm2-arith`` preset's prompts do) three times with ``HFBackend``:

- *batched*: one ``chat`` call with every prompt (left-padded micro-batches sorted by length, the
  prefix the prompts share computed once);
- *no prefix cache*: the same call with ``prefix_cache=False``;
- *sequential*: one ``chat`` call per prompt.

All use the same ``max_new_tokens``, model, dtype and ``torch.set_num_threads(--threads)``.
Prints output tokens per second for each, the ratios batched/sequential (goal: >= 4x on 2 cores)
and prefix cache on/off, and whether the greedy texts agree between the modes (they must in
float32: left padding and the prefix cache are exact; in bfloat16 near-ties may round apart).

Usage::

    python benchmarks/bench_generation_throughput.py                 # models/base if built, else a fresh tiny model
    python benchmarks/bench_generation_throughput.py --model models/base --prompts 64 --max-new-tokens 32
    python benchmarks/bench_generation_throughput.py --model models/base --worked-examples --dtype bfloat16 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from selfevolve.runtime_env import apply_defaults  # noqa: E402

# Before torch loads OpenMP: the stages' environment (offline hubs; OpenMP threads spin ~10 us, then
# sleep: selfevolve.runtime_env.SPIN_DEFAULT). Set OMP_WAIT_POLICY=PASSIVE (or ACTIVE) to measure another policy.
apply_defaults()


def prompts(n: int, seed: int = 0, worked_examples: bool = False) -> list[list[dict[str, str]]]:
    from selfevolve.embedded.transcripts import arith_transcripts
    from selfevolve.roles.templates import worked_examples as shots

    head = shots("solver", "math", "arith") if worked_examples else []
    return [head + t[:-1] for _, t in arith_transcripts(n, seed=seed)]  # drop the assistant turn


def build_model(path: Path) -> Path:
    from selfevolve.embedded.transcripts import arith_transcripts
    from selfevolve.embedded.tinymodel import save_untrained

    corpus = [m["content"] for _, t in arith_transcripts(300) for m in t]
    return save_untrained(path, corpus)


def run(backend, convs, sampling, one_by_one: bool) -> tuple[list, float, int]:
    t0 = time.perf_counter()
    if one_by_one:
        out = [backend.chat([c], sampling)[0] for c in convs]
    else:
        out = backend.chat(convs, sampling)
    seconds = time.perf_counter() - t0
    tokens = sum(c.output_tokens for comps in out for c in comps)
    return out, seconds, tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model directory (default: models/base if it exists, else a fresh untrained tiny model)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32, help="HFBackend micro-batch size for the batched run")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads for both runs")
    ap.add_argument("--repeats", type=int, default=1, help="timed repetitions of each mode (best is reported)")
    ap.add_argument("--dtype", default="float32", help="generation dtype (float32 | bfloat16)")
    ap.add_argument("--worked-examples", action="store_true",
                    help="start every prompt with the arith worked exchange (a long shared prefix)")
    args = ap.parse_args(argv)

    import torch

    from selfevolve.backends.base import SamplingConfig
    from selfevolve.backends.hf import HFBackend

    torch.set_num_threads(args.threads)
    tmp = None
    if args.model:
        model = Path(args.model)
    elif (ROOT / "models" / "base" / "config.json").is_file():
        model = ROOT / "models" / "base"
    else:
        tmp = tempfile.TemporaryDirectory()
        model = build_model(Path(tmp.name) / "tiny")
    backend = HFBackend(model, device="cpu", batch_size=args.batch_size, dtype=args.dtype)
    uncached = HFBackend.from_pretrained_objects(backend.model, backend.tokenizer, batch_size=args.batch_size,
                                                 prefix_cache=False)
    convs = prompts(args.prompts, worked_examples=args.worked_examples)
    lens = [len(x) for x in backend.encode(convs)]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)
    backend.chat(convs[:4], sampling)  # warm-up (first-call allocations)

    best = {}
    outs = {}
    modes = ("batched", "no prefix cache", "sequential")
    for mode in modes:
        for _ in range(args.repeats):
            out, seconds, tokens = run(uncached if mode == "no prefix cache" else backend, convs, sampling,
                                       one_by_one=(mode == "sequential"))
            if mode == "batched":
                shared = backend.last_stats.cached_prefix_tokens
            if mode not in best or seconds < best[mode][0]:
                best[mode] = (seconds, tokens)
            outs[mode] = out
    agree = {m: sum(a[0].text == b[0].text for a, b in zip(outs["batched"], outs[m])) for m in modes[1:]}
    tps = {m: t / s for m, (s, t) in best.items()}
    ratio = tps["batched"] / tps["sequential"]
    n_params = sum(p.numel() for p in backend.model.parameters())
    print(f"model: {model} ({n_params / 1e6:.2f} M parameters), threads: {torch.get_num_threads()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}")
    print(f"prompts: {len(convs)} (prompt tokens {min(lens)}-{max(lens)}, mean {sum(lens) / len(lens):.0f}, "
          f"{shared} shared by all), max_new_tokens: {args.max_new_tokens}, greedy, batch_size: {args.batch_size}, "
          f"dtype: {args.dtype}")
    for m in modes:
        s, t = best[m]
        print(f"{m:>15}: {t:6d} tokens in {s:7.2f} s = {tps[m]:8.1f} tokens/s")
    print(f"ratio batched/sequential: {ratio:.1f}x (goal >= 4x)")
    print(f"ratio prefix cache on/off: {tps['batched'] / tps['no prefix cache']:.2f}x")
    for m, n in agree.items():
        print(f"greedy texts identical, batched vs {m}: {n}/{len(convs)}")
    if tmp is not None:
        tmp.cleanup()
    exact = args.dtype == "float32"
    return 0 if not exact or all(n == len(convs) for n in agree.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
