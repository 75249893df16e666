"""``bootstrap`` stage: build the embedded default model from nothing (no hub, no GPU).

1. Render role transcripts of all four SAGE roles from the seed set (``seeds.transcripts``).
2. Train a byte-level BPE tokenizer on them (``tinymodel.build_tokenizer``).
3. Build a small Llama from a config (``tinymodel.build_model``).
4. Warm-start it with TRL's ``SFTTrainer`` on the transcripts (assistant tokens only in the loss).
5. ``save_pretrained`` model and tokenizer to the output directory, with ``bootstrap.json``
   (sizes, loss curve, wall time).

Deterministic for a given ``params.seed`` (single-threaded data order, seeded init and sampling).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from selfevolve.config import Params

log = logging.getLogger(__name__)


def warm_start_chats(params: Params, seed_questions=None) -> list[list[dict[str, str]]]:
    """The transcripts the warm start trains on, for the configured seed set."""
    from selfevolve.embedded import transcripts

    n = params.bootstrap.transcripts
    if params.seeds.set == "arith":
        return transcripts.arith_transcripts(n, seed=params.seed)
    qs = [q for q in (seed_questions or []) if q.domain == "code"]
    chats = transcripts.code_transcripts(qs, n // 2, seed=params.seed) if qs else []
    return chats + transcripts.arith_transcripts(n - len(chats), seed=params.seed)


def run_bootstrap(params: Params, out_dir: str | Path, seed_questions=None) -> dict:
    """Build, warm-start and save the tiny model to ``out_dir``. Returns the summary dict
    (``parameters``, ``vocab_size``, ``final_loss``, ``seconds``, ``loss_curve``).

    Raises ``ValueError`` if the transcripts are empty.
    """
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from selfevolve.embedded import tinymodel

    t0 = time.time()
    out_dir = Path(out_dir)
    bp = params.bootstrap
    torch.manual_seed(params.seed)
    chats = warm_start_chats(params, seed_questions)
    if not chats:
        raise ValueError("no warm-start transcripts: the seed set is empty")
    tok = tinymodel.build_tokenizer((m["content"] for c in chats for m in c), vocab_size=bp.vocab_size)
    model = tinymodel.build_model(tok, hidden_size=bp.hidden_size, num_layers=bp.num_layers, num_heads=bp.num_heads,
                                  intermediate_size=bp.intermediate_size, max_position_embeddings=bp.max_position_embeddings,
                                  seed=params.seed)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d, %d transcripts", n_params, len(tok), len(chats))

    curve: list[dict] = []

    class _Curve(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                curve.append({"step": state.global_step, "loss": float(logs["loss"])})

    ds = Dataset.from_list([{"messages": c} for c in chats])
    work = out_dir.parent / f".{out_dir.name}.trainer"
    cfg = SFTConfig(
        output_dir=str(work),
        max_steps=bp.steps,
        per_device_train_batch_size=bp.batch_size,
        learning_rate=bp.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(50, bp.steps // 10),
        weight_decay=0.0,
        logging_steps=max(1, bp.steps // 20),
        save_strategy="no",
        report_to="none",
        bf16=False,
        use_cpu=True,
        seed=params.seed,
        data_seed=params.seed,
        assistant_only_loss=True,
        max_length=bp.max_position_embeddings,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok, callbacks=[_Curve()])
    trainer.train()
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    summary = {
        "parameters": n_params,
        "vocab_size": len(tok),
        "transcripts": len(chats),
        "steps": bp.steps,
        "final_loss": curve[-1]["loss"] if curve else None,
        "loss_curve": curve,
        "seconds": round(time.time() - t0, 2),
    }
    (out_dir / "bootstrap.json").write_text(json.dumps(summary, indent=2))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return summary
