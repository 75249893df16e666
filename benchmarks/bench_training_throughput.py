"""Training throughput of the embedded model: where a warm-start step's time goes, against the
machine's matmul peak and against a plain TRL ``SFTTrainer`` on the same data.

The warm start (``selfevolve.embedded.warm_start.run_bootstrap``) trains the 0.97 M-parameter Llama
of ``params.yaml`` ``bootstrap`` on role transcripts with ``selfevolve.training.loop.fit``: each step
draws ``bootstrap.batch_size`` transcripts, tokenises them through the chat template
(``training.batches.encode_rows``), sorts them by length into micro-batches each padded to its own
longest (``training.loop.sft_backward``), and runs forward, backward and AdamW in
``model.train_precision``. This benchmark runs the same model, data and precision in one process:

- *fit phases*: the library's step, timed per phase (tokenise + pad / forward / backward /
  optimizer), with tokens per second counted two ways: real tokens (what the data holds) and
  padded positions (what the matmuls process);
- *one padded batch*: the same steps with the whole batch padded to its longest row (the step
  before length-sorted micro-batches);
- *sdpa attention*: the same steps with PyTorch's scaled-dot-product kernels instead of the eager
  attention the library trains with on the CPU (``training.rl.training_attention``);
- *pre-tokenised*: the same steps with every transcript tokenised once up front (what a
  tokenised dataset reused across steps would save);
- *TRL*: ``trl.SFTTrainer`` (completion-only loss, the same batch size, learning rate and
  precision) for the same number of steps on the same rows;
- *matmul peak*: square matmuls in float32 and bfloat16 on the same threads: the FLOP/s the CPU
  reaches when the work is one big kernel;
- *passive OpenMP threads* (``--threads`` 2 or more): the library's steps again in a child process
  with ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep as soon as a kernel ends) against this process's
  policy (``selfevolve.runtime_env.SPIN_DEFAULT``: spin ~10 us, then sleep); libgomp reads the
  policy when it loads, hence the child.

Achieved FLOP/s = 6 x (matmul parameters) x real tokens / s + attention (12 x layers x hidden x
T per token, T the padded length), the usual training-FLOP count (Kaplan et al. 2020, "Scaling Laws
for Neural Language Models", section 2.1). Prints every figure and the ratios in one run.

    .venv/bin/python benchmarks/bench_training_throughput.py                 # 60 steps each, 1 thread
    .venv/bin/python benchmarks/bench_training_throughput.py --steps 200 --threads 2
    .venv/bin/python benchmarks/bench_training_throughput.py --pretrained DIR   # a pretrained model's train_rl step
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from selfevolve.runtime_env import apply_defaults  # noqa: E402

apply_defaults()  # before torch loads OpenMP: the stages' environment (offline hubs, the OpenMP spin count)


def matmul_peak(dtype, seconds: float = 3.0, n: int = 1024) -> float:
    """FLOP/s of repeated ``n x n`` matmuls in ``dtype`` for about ``seconds``."""
    import torch

    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.matmul(a, b)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.matmul(a, b)
        reps += 1
    return 2 * n ** 3 * reps / (time.perf_counter() - t0)


def training_flops(model, padded_positions: int, seq_len: float) -> float:
    """Training FLOPs of a run that put ``padded_positions`` through the model (padding included: the
    matmuls process it) at a mean sequence length ``seq_len``: 6 x matmul parameters (embeddings excluded, the output head
    included) x tokens through the matmuls, plus attention scores and values (12 x layers x hidden x
    sequence length per position)."""
    cfg = model.config
    matmul = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed_tokens" not in n)
    if getattr(cfg, "tie_word_embeddings", False):
        matmul += model.get_input_embeddings().weight.numel()
    return 6 * matmul * padded_positions + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len * padded_positions


def fit_phases(model, tok, rows, steps: int, batch_size: int, lr: float, precision: str, max_length: int,
               pretokenised: bool = False, micro_batch_rows: int | None = None, share_prefix: bool = True) -> dict:
    """``steps`` steps of the library's training step (``training.loop.sft_backward``: length-sorted
    micro-batches of ``micro_batch_rows``, the library's by default; 0 = one padded batch; a prompt
    prefix the rows of a micro-batch share run once unless ``share_prefix`` is False), timed per
    phase."""
    import torch

    from selfevolve.training.loop import MICRO_BATCH_ROWS, autocast, completion_nll, micro_batches, positions_run
    from selfevolve.training.batches import encode_rows

    rows_per_part = MICRO_BATCH_ROWS if micro_batch_rows is None else micro_batch_rows
    rng = random.Random(0)
    cache = {}
    if pretokenised:
        t0 = time.perf_counter()
        cache = {r.id: e for r, e in zip(rows, encode_rows(tok, rows, max_length))}
        setup = time.perf_counter() - t0
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    times = {"tokenise": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    real = padded = 0
    longest = []
    for _ in range(steps):
        batch = rng.sample(rows, batch_size)
        t0 = time.perf_counter()
        encoded = [cache[r.id] for r in batch] if pretokenised else encode_rows(tok, batch, max_length)
        parts = micro_batches(tok, encoded, rows_per_part, share_prefix)
        n_tokens = sum(float(cmask.sum()) for _, _, cmask, _ in parts)
        times["tokenise"] += time.perf_counter() - t0
        opt.zero_grad()
        loss = 0.0
        for ids, attn, cmask, prefix_len in parts:
            t1 = time.perf_counter()
            with autocast(precision):
                part_loss = completion_nll(model, ids, attn, cmask, prefix_len) / n_tokens
            t2 = time.perf_counter()
            part_loss.backward()
            times["forward"] += t2 - t1
            times["backward"] += time.perf_counter() - t2
            loss += float(part_loss.detach())
            real += int(attn.sum())
            padded += positions_run(attn.shape[0], attn.shape[1], prefix_len)
            longest.append(attn.shape[1])
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times["optimizer"] += time.perf_counter() - t3
    model.eval()
    total = sum(times.values())
    out = {"seconds": total, "phases": times, "real_tokens": real, "padded_positions": padded,
           "mean_seq_len": sum(longest) / len(longest), "final_loss": loss}
    if pretokenised:
        out["setup_seconds"] = setup
    return out


def trl_run(model_dir: Path, rows, steps: int, batch_size: int, lr: float, precision: str, max_length: int, out: Path) -> dict:
    """``trl.SFTTrainer`` on the same rows (prompt/completion, loss on the completion only)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from selfevolve.training.rl import training_attention

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = training_attention(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))  # as fit's
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": r.prompt}],
                               "completion": [{"role": "assistant", "content": r.completion}]} for r in rows])
    cfg = SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch_size, learning_rate=lr,
                    lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, logging_steps=steps,
                    save_strategy="no", report_to="none", use_cpu=not torch.cuda.is_available(), bf16=precision == "bfloat16",
                    max_length=max_length, completion_only_loss=True, dataloader_num_workers=0, seed=0,
                    disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=data, processing_class=tok, )
    lengths = [len(x) for x in trainer.train_dataset["input_ids"]]
    t0 = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "real_tokens": round(sum(lengths) / len(lengths) * batch_size * steps), "final_loss": result.training_loss}


def pretrained_prefix(model_dir: Path, steps: int, threads: int) -> int:
    """The SmolLM2 arith preset's train_rl batch (16 rows: 14 Solver labels of random 3-digit sums, a
    Challenger and a Planner row; ``rl.batch_size`` 16, lr 2e-5) through the library's step with a
    shared prompt prefix run once (``training.loop.completion_nll``) and with the plain length cut:
    seconds per step, positions run, and the final loss of each (the same gradient)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfevolve.records import Rollout
    from selfevolve.roles import templates
    from selfevolve.training.loop import resolve_precision
    from selfevolve.training.rl import training_attention

    torch.set_num_threads(threads)
    rng = random.Random(0)
    rows = []
    for i in range(14):
        a, b = rng.randrange(100, 1000), rng.randrange(100, 1000)
        rows.append(Rollout(id=f"s{i}", role="solver", group=f"s{i}", question_id=f"q{i}", reward=1.0,
                            prompt=templates.render("solver", domain="math", question=f"Compute {a} + {b}.", plan=""),
                            completion=f"<think>{a} + {b} = {a + b}</think><answer>{a + b}</answer>"))
    for role in ("challenger", "planner"):
        ex = templates.worked_examples(role, "math", "arith")
        rows.append(Rollout(id=role, role=role, group=role, question_id="", prompt=ex[0]["content"], completion=ex[1]["content"],
                            reward=1.0))
    tok = AutoTokenizer.from_pretrained(model_dir)
    precision = resolve_precision("auto")

    def fresh():
        return training_attention(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))

    common = dict(steps=steps, batch_size=len(rows), lr=2e-5, precision=precision, max_length=1024)
    print(f"{model_dir}: batch {len(rows)} (14 Solver rows, 2 of other roles), {steps} steps, {precision}, {threads} thread(s)")
    fit_phases(fresh(), tok, rows, **(common | {"steps": 1}))  # warm-up
    runs = {}
    for name, share in (("shared prefix run once", True), ("plain length cut", False)):
        runs[name] = r = fit_phases(fresh(), tok, rows, share_prefix=share, **common)
        print(f"  {name:24s} {r['seconds'] / steps:6.2f} s/step, {r['padded_positions'] // steps:5d} positions a step, "
              f"loss {r['final_loss']:.4f}")
    ratio = runs["plain length cut"]["seconds"] / runs["shared prefix run once"]["seconds"]
    print(f"\nratio (> 1: the first is slower)\n  {'plain length cut / shared prefix':40s} {ratio:.2f}x")
    return 0


def passive_fit_seconds(argv: list[str]) -> float:
    """Seconds of the library's fit steps (the same arguments ``argv``) in a child process whose
    OpenMP threads sleep as soon as a kernel ends (``OMP_WAIT_POLICY=PASSIVE``, no spin count)."""
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"} | {"OMP_WAIT_POLICY": "PASSIVE"}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--fit-only"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="params file whose bootstrap section sizes the model")
    ap.add_argument("--steps", type=int, default=60, help="training steps per variant")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--transcripts", type=int, default=4000, help="transcripts to draw batches from")
    ap.add_argument("--skip-trl", action="store_true", help="leave out the TRL SFTTrainer run")
    ap.add_argument("--fit-only", action="store_true", help=argparse.SUPPRESS)  # the passive-threads child: fit, as JSON
    ap.add_argument("--pretrained", type=Path, help="a pretrained model folder (SmolLM2-135M-Instruct as converted by "
                    "selfevolve.backends.gguf_model): time only its train_rl step on arith role rows, shared prompt prefix "
                    "run once against the plain cut")
    args = ap.parse_args(argv)
    if args.pretrained:
        return pretrained_prefix(args.pretrained, min(args.steps, 10), args.threads)

    import torch

    from selfevolve.config import load_params
    from selfevolve.embedded import tinymodel
    from selfevolve.embedded.transcripts import as_rows
    from selfevolve.embedded.warm_start import warm_start_transcripts
    from selfevolve.training.loop import resolve_precision
    from selfevolve.training.rl import training_attention

    torch.set_num_threads(args.threads)
    params = load_params(args.params)
    bp = params.bootstrap.model_copy(update={"transcripts": args.transcripts})
    params = params.model_copy(update={"bootstrap": bp})
    transcripts = warm_start_transcripts(params)
    rows = as_rows(transcripts)
    tok = tinymodel.build_tokenizer((m["content"] for _, c in transcripts for m in c), vocab_size=bp.vocab_size)

    def fresh(attention: str | None = None):  # the warm start's model, with the attention it trains with unless told
        model = training_attention(tinymodel.build_model(tok, hidden_size=bp.hidden_size, num_layers=bp.num_layers,
                                                         num_heads=bp.num_heads, intermediate_size=bp.intermediate_size,
                                                         max_position_embeddings=bp.max_position_embeddings, seed=params.seed,
                                                         position_encoding=bp.position_encoding))
        if attention:
            model.set_attn_implementation(attention)
        return model

    precision = resolve_precision(params.model.train_precision)
    common = dict(steps=args.steps, batch_size=bp.batch_size, lr=bp.learning_rate, precision=precision,
                  max_length=bp.max_position_embeddings)
    print(f"model: {sum(p.numel() for p in fresh().parameters()):,} parameters, batch {bp.batch_size}, {args.steps} steps, "
          f"{precision}, {args.threads} thread(s)")
    fit_phases(fresh(), tok, rows, **(common | {"steps": min(5, args.steps)}))  # warm-up: kernels, allocator, caches
    if args.fit_only:
        print(json.dumps({"seconds": fit_phases(fresh(), tok, rows, **common)["seconds"]}))
        return 0
    peak32, peak16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
    print(f"matmul peak: float32 {peak32 / 1e9:.1f} GFLOP/s, bfloat16 {peak16 / 1e9:.1f} GFLOP/s")
    peak = peak16 if precision == "bfloat16" else peak32

    model = fresh()
    base = fit_phases(model, tok, rows, **common)
    achieved = training_flops(model, base["padded_positions"], base["mean_seq_len"]) / base["seconds"]
    print(f"\nfit (the library's step): {base['seconds']:.2f} s, {base['seconds'] / args.steps * 1000:.0f} ms/step, "
          f"{base['real_tokens'] / base['seconds']:,.0f} real tokens/s ({base['padded_positions'] / base['seconds']:,.0f} "
          f"positions/s; {base['real_tokens'] / base['padded_positions']:.0%} of positions are real), loss {base['final_loss']:.3f}")
    for k, v in base["phases"].items():
        print(f"  {k:10s} {v:7.2f} s  {v / base['seconds']:5.1%}")
    print(f"  achieved {achieved / 1e9:.2f} GFLOP/s = {achieved / peak:.1%} of the {precision} matmul peak")

    model = fresh()
    padded_batch = fit_phases(model, tok, rows, micro_batch_rows=0, **common)
    print(f"\none padded batch a step (no length-sorted micro-batches): {padded_batch['seconds']:.2f} s, "
          f"{padded_batch['real_tokens'] / padded_batch['padded_positions']:.0%} of positions are real, "
          f"loss {padded_batch['final_loss']:.3f}")

    model = fresh()
    pre = fit_phases(model, tok, rows, pretokenised=True, **common)
    print(f"\npre-tokenised: {pre['seconds']:.2f} s ({pre['setup_seconds']:.2f} s to tokenise {len(rows)} rows once), "
          f"{pre['real_tokens'] / pre['seconds']:,.0f} real tokens/s")

    model = fresh("sdpa")
    sdpa = fit_phases(model, tok, rows, **common)
    print(f"\nsdpa attention (PyTorch's CPU flash-attention kernels): {sdpa['seconds']:.2f} s, "
          f"backward {sdpa['phases']['backward'] / sdpa['seconds']:.0%} of the step, loss {sdpa['final_loss']:.3f}")

    rows_out = []
    if args.threads > 1:
        passive = passive_fit_seconds(argv if argv is not None else sys.argv[1:])
        policy = os.environ.get("OMP_WAIT_POLICY") or f"spin {os.environ.get('GOMP_SPINCOUNT', 'default')}"
        print(f"\npassive OpenMP threads (OMP_WAIT_POLICY=PASSIVE, a child process): {passive:.2f} s, "
              f"{passive / args.steps * 1000:.0f} ms/step; this process: {policy}")
        rows_out.append((f"passive threads / {policy}", passive / base["seconds"]))
    rows_out += [("one padded batch / fit", padded_batch["seconds"] / base["seconds"]),
                ("fit / pre-tokenised", base["seconds"] / pre["seconds"]),
                (f"sdpa / {fresh().config._attn_implementation} attention (per step)", sdpa["seconds"] / base["seconds"])]
    if not args.skip_trl:
        with tempfile.TemporaryDirectory() as tmp:
            model = fresh()
            model.save_pretrained(Path(tmp) / "m")
            tok.save_pretrained(Path(tmp) / "m")
            trl = trl_run(Path(tmp) / "m", rows, args.steps, bp.batch_size, bp.learning_rate, precision,
                          bp.max_position_embeddings, Path(tmp) / "out")
        print(f"\nTRL SFTTrainer: {trl['seconds']:.2f} s, {trl['seconds'] / args.steps * 1000:.0f} ms/step, "
              f"~{trl['real_tokens'] / trl['seconds']:,.0f} real tokens/s, loss {trl['final_loss']:.3f}")
        rows_out.append(("TRL SFTTrainer / fit (time per step)", trl["seconds"] / base["seconds"]))
    print("\nratios (> 1: the first is slower)")
    for name, r in rows_out:
        print(f"  {name:40s} {r:.2f}x")
    print(f"  {'matmul peak / fit achieved':40s} {peak / achieved:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
