"""A saved model's validation outcome, kept beside its weights so that the next stage validating the
same weights on the same questions reads it instead of answering them again.

A cycle validates the same weights more than once: ``train_sft``'s "before" is the checkpoint
``train_rl`` just kept and validated, and the next cycle's ``train_rl`` starts (step 0) from the
model ``train_sft`` validated last. The outcomes agreed to the question in every campaign measured
(docs/measurements.md, "Validation outcomes saved beside the weights"); each repeat costs a greedy
pass over ``rl.eval_questions`` questions (~35 s at two threads on the embedded model).

The file (:data:`VALIDATION_FILE` in the model folder) holds ``{"key", "weights", "outcome"}``:
``key`` names what the outcome depends on besides the weights (:func:`validation_key`: the
questions, the decoding, the backend and the dtype it answered in), ``weights`` a digest of the
weight files (:func:`weights_digest`), ``outcome`` the 0/1 per question. :func:`saved_validation`
returns the outcome only when both match, so retrained, edited or replaced weights (a stale file
left in a folder trained into again) are validated afresh, and an unreadable file is ignored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

#: The file beside a model's weights that holds its validation outcome.
VALIDATION_FILE = "validation.json"
#: The weight files a digest covers (top level of the model folder).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin")


def weights_digest(model_dir: str | Path) -> str | None:
    """sha256 (hex) over the names and bytes of the weight files (:data:`WEIGHT_PATTERNS`) at the top
    of ``model_dir``; None when it is not a folder or holds no weight file (a hub name, say)."""
    folder = Path(model_dir)
    files = sorted({p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern)}) if folder.is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0")
        with p.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def validation_key(questions: Sequence, config, backend: str, dtype: str) -> str:
    """sha256 (hex) of what a validation outcome depends on besides the weights: the questions
    (``Question`` records, every field), the decoding (``config``, a pydantic model such as
    ``SolveConfig``), the backend kind (``"hf"``, ``"vllm"`` ...) and the dtype the model answered in.
    Micro-batching is not part of it: the hf backend's greedy answers agreed between a trainer's
    in-memory batches and the stages' (docs/measurements.md)."""
    payload = {"questions": [q.model_dump(mode="json") for q in questions], "config": config.model_dump(mode="json"),
               "backend": backend, "dtype": dtype}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def save_validation(model_dir: str | Path, key: str, outcome: Sequence[int]) -> None:
    """Write ``outcome`` (0/1 per question) of the weights in ``model_dir`` under ``key``; nothing
    when the folder holds no weight file."""
    digest = weights_digest(model_dir)
    if digest is not None:
        (Path(model_dir) / VALIDATION_FILE).write_text(json.dumps({"key": key, "weights": digest, "outcome": [int(c) for c in outcome]}))


def saved_validation(model_dir: str | Path, key: str) -> list[int] | None:
    """The outcome saved beside the weights in ``model_dir`` under ``key``, or None when there is none,
    it was saved under another key or for other weights, or the file is unreadable."""
    path = Path(model_dir) / VALIDATION_FILE
    try:
        saved = json.loads(path.read_text())
        if saved["key"] != key or saved["weights"] != weights_digest(model_dir):
            return None
        outcome = saved["outcome"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(outcome, list) or not all(c in (0, 1) for c in outcome):
        return None
    return [int(c) for c in outcome]
