"""``bootstrap`` stage: build the embedded default model from nothing (no hub, no GPU).

1. Render role transcripts of all four SAGE roles from the seed set (``embedded.transcripts``).
2. Train a byte-level BPE tokenizer on them (``tinymodel.build_tokenizer``).
3. Build a small Llama from a config (``tinymodel.build_model``).
4. Warm-start it on the transcripts (completion tokens only in the loss) with the training loop
   every cycle uses (``selfevolve.training.loop.fit``): AdamW on a warm-up / stable / decay
   schedule, bfloat16 matmuls on the CPU (``model.train_precision``).
5. ``save_pretrained`` model and tokenizer to the output directory, with ``bootstrap.json``
   (sizes, loss curve, wall time).

Deterministic for a given ``params.seed`` (single-threaded data order, seeded init and sampling).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from statistics import fmean
from typing import Callable

from selfevolve.config import Params
from selfevolve.records import write_model_summary

log = logging.getLogger(__name__)


def warm_start_transcripts(params: Params, seed_questions=None) -> list[tuple[str, list[dict[str, str]]]]:
    """The (SAGE role, chat) transcripts the warm start trains on, for the configured seed set."""
    from selfevolve.embedded import transcripts
    from selfevolve.questions.seed_sets import arith_forms

    n = params.bootstrap.transcripts
    seed_forms = arith_forms(params)[0]
    if params.seeds.set == "arith":
        return transcripts.arith_transcripts(n, seed=params.seed, forms=seed_forms)
    qs = [q for q in (seed_questions or []) if q.domain == "code"]
    chats = transcripts.code_transcripts(qs, n // 2, seed=params.seed) if qs else []
    return chats + transcripts.arith_transcripts(n - len(chats), seed=params.seed, forms=seed_forms)


def run_bootstrap(params: Params, out_dir: str | Path, seed_questions=None,
                  probe: Callable[[object, object], float] | None = None) -> tuple[dict, list]:
    """Build, warm-start and save the tiny model to ``out_dir``. Returns the summary dict
    (``parameters``, ``vocab_size``, ``final_loss``, ``seconds``, ``loss_curve``, ``rounds``) and the
    training rows (``Rollout`` records: the transcripts, which later cycles replay).

    ``probe(model, tokenizer)`` measures the frontier's standing (a pass@k in [0, 1]). When given,
    the warm start checks it after its ``bootstrap.steps`` and keeps going while it is below
    ``bootstrap.min_frontier_pass``: up to ``bootstrap.extra_rounds`` more rounds of
    ``bootstrap.extra_steps`` steps, each re-warmed and decayed again (a fresh optimizer, the
    transcripts' next epochs), and keeps the round whose probe was best. Whether a foothold on the
    frontier appears is a matter of the training trajectory (measured: three CPU kernel paths, same
    seed, frontier 0.005 / 0.030 / 0.308) and more training can lose it again (measured: a good
    foothold, pass@8 0.43, fell to 0.25 after 600 more steps), so every round is a new chance and
    none can make the kept model worse (docs/measurements.md). ``summary["rounds"]`` lists
    ``{round, steps, frontier_pass, kept}`` per check.

    Raises ``ValueError`` if the transcripts are empty.
    """
    import torch

    from selfevolve.embedded import tinymodel
    from selfevolve.embedded.transcripts import as_rows
    from selfevolve.training.loop import fit
    from selfevolve.training.rl import snapshot

    t0 = time.time()
    out_dir = Path(out_dir)
    bp = params.bootstrap
    torch.manual_seed(params.seed)
    transcripts = warm_start_transcripts(params, seed_questions)
    if not transcripts:
        raise ValueError("no warm-start transcripts: the seed set is empty")
    tok = tinymodel.build_tokenizer((m["content"] for _, c in transcripts for m in c), vocab_size=bp.vocab_size)
    model = tinymodel.build_model(tok, hidden_size=bp.hidden_size, num_layers=bp.num_layers, num_heads=bp.num_heads,
                                  intermediate_size=bp.intermediate_size, max_position_embeddings=bp.max_position_embeddings,
                                  seed=params.seed)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d, %d transcripts", n_params, len(tok), len(transcripts))
    rows = as_rows(transcripts)
    order = list(range(len(rows)))

    def draw(rng):  # epochs over the transcripts in a seeded order
        batch = []
        for _ in range(bp.batch_size):
            if not order:
                order.extend(range(len(rows)))
            if len(order) == len(rows):
                rng.shuffle(order)
            batch.append(rows[order.pop()])
        return batch

    def train(steps: int, seed: int, desc: str) -> list[dict]:
        return fit(model, tok, draw, steps=steps, learning_rate=bp.learning_rate, warmup_steps=min(50, steps // 10),
                   decay_steps=round(steps * bp.decay_fraction), min_lr_ratio=0.01, max_length=bp.max_position_embeddings,
                   seed=seed, precision=params.model.train_precision, desc=desc)

    curve = train(bp.steps, params.seed, "bootstrap (warm start)")
    rounds: list[dict] = []
    if probe is not None:
        rounds.append({"round": 0, "steps": bp.steps, "frontier_pass": probe(model, tok)})
        best = (rounds[0]["frontier_pass"], 0, snapshot(model))
        while best[0] < bp.min_frontier_pass and len(rounds) <= bp.extra_rounds:
            r = len(rounds)
            log.info("frontier pass@k %.3f < bootstrap.min_frontier_pass %.3f: extra round %d of %d steps",
                     best[0], bp.min_frontier_pass, r, bp.extra_steps)
            last = curve[-1]["step"]
            curve += [{**e, "step": last + e["step"]} for e in train(bp.extra_steps, params.seed + r, f"bootstrap (extra round {r})")]
            rounds.append({"round": r, "steps": bp.extra_steps, "frontier_pass": probe(model, tok)})
            if rounds[-1]["frontier_pass"] > best[0]:
                best = (rounds[-1]["frontier_pass"], r, snapshot(model))
        if best[1] != len(rounds) - 1:
            model.load_state_dict(best[2])
        for entry in rounds:
            entry["kept"] = entry["round"] == best[1]
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    every = max(1, len(curve) // 50)
    summary = {
        "parameters": n_params,
        "vocab_size": len(tok),
        "transcripts": len(transcripts),
        "steps": len(curve),
        "extra_rounds": max(0, len(rounds) - 1),
        "rounds": rounds,
        "final_loss": fmean(r["loss"] for r in curve[-every:]) if curve else None,
        "loss_curve": [r for r in curve if r["step"] % every == 0],
        "seconds": round(time.time() - t0, 2),
    }
    write_model_summary(out_dir / "bootstrap.json", summary)
    return summary, rows
