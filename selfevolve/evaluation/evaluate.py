"""Evaluation of one model on benchmarks: the ``evaluate`` stage's work and ``selfevolve evaluate``.

``evaluate_benchmarks(backend, specs, config, heldout=None, data_dir=None, seed=0)``
runs, for each ``BenchmarkSpec(name, limit, k)``, :func:`selfevolve.evaluation.solve.evaluate_questions`
on its questions: ``heldout`` is the campaign's held-out file (``data/cycles/base/heldout.jsonl``);
a benchmark name (``gsm8k``, ``math500``, ``olympiadbench``, ``humaneval``, ``mbpp``, ...; see
``selfevolve.questions.benchmarks``) or a JSONL/JSON path is loaded with ``load_benchmark``;
``limit`` keeps the first N. It returns the per-question rows of each benchmark (completions,
graded answers or programs, per-sample correctness, verifier status and detail, output tokens,
finish reasons; the caller writes them as ``<name>.jsonl``) and flat metrics ``{f"{name}_{metric}": value}`` (metric names in
``selfevolve.evaluation.solve``). The ``heldout`` benchmark always yields ``heldout_accuracy`` and
``heldout_n``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Sequence

from selfevolve.backends.base import Backend
from selfevolve.config import BenchmarkSpec
from selfevolve.evaluation.solve import HELDOUT, SolveConfig, benchmark_key, evaluate_questions
from selfevolve.records import Question
from selfevolve.seeding import derive_seed

log = logging.getLogger("selfevolve")


def load_questions(spec: BenchmarkSpec, heldout: Sequence[Question] | None = None,
                   data_dir: str | Path | None = None) -> list[Question]:
    """The questions of one spec (first ``spec.limit``): the campaign's ``heldout`` questions for
    ``heldout``, else ``load_benchmark(spec.name, data_dir, limit=spec.limit)``. Raises
    ``ValueError`` for ``heldout`` without held-out questions, and what ``load_benchmark`` raises
    (``BenchmarkNotFoundError``, ``BenchmarkFormatError``, ``ValueError``)."""
    from selfevolve.questions.benchmarks import load_benchmark

    if spec.name == HELDOUT:
        if heldout is None:
            raise ValueError("benchmark 'heldout' needs the campaign's held-out questions "
                             "(data/cycles/base/heldout.jsonl, written by the 'seeds' stage)")
        return list(heldout)[: spec.limit]
    return load_benchmark(spec.name, data_dir=data_dir, limit=spec.limit)


def evaluate_benchmarks(backend: Backend, specs: Sequence[BenchmarkSpec], config: SolveConfig,
                        heldout: Sequence[Question] | None = None, data_dir: str | Path | None = None,
                        seed: int = 0) -> tuple[dict[str, list[dict]], dict[str, Any]]:
    """Evaluate the model behind ``backend`` on every spec.

    Args:
        backend: any ``Backend`` (hf, vllm, openai).
        specs: ``BenchmarkSpec(name, limit, k)`` list (``params.evaluation.benchmarks`` in the stage).
        config: how to answer and grade (``solve.SolveConfig``: ``SolveConfig.from_params`` of the
            campaign's params).
        heldout: the campaign's held-out questions (needed by a ``heldout`` spec).
        data_dir: folder of the local benchmark files (``None``: ``load_benchmark``'s default).
        seed: base seed; each benchmark samples with a seed derived from (seed, name).

    Returns ``(rows, metrics)``: ``rows[name]`` the per-question rows of each benchmark (to be
    written as ``<name>.jsonl``) and flat metrics ``{f"{name}_{metric}": value}``, e.g.
    ``heldout_accuracy``, ``heldout_n``, ``humaneval_pass_at_5``. ``name`` is the spec name (a path
    contributes its file stem); a second spec with the same name gets ``_k<k>`` appended.

    Raises ``ValueError`` on a repeated spec name and a ``heldout`` spec without held-out
    questions, and what loading raises (``BenchmarkNotFoundError`` names the file and the
    ``--data-dir`` to use).
    """
    metrics: dict[str, Any] = {}
    results: dict[str, list[dict]] = {}
    for spec in specs:
        key = benchmark_key(spec.name)
        if key in results:
            key = f"{key}_k{spec.k}"
        if key in results:
            raise ValueError(f"benchmark {spec.name!r} with k={spec.k} is listed twice in evaluation.benchmarks")
        t0 = time.time()
        questions = load_questions(spec, heldout, data_dir)
        rows, m = evaluate_questions(backend, questions, config, k=spec.k, spec_name=spec.name, seed=derive_seed(seed, key))
        results[key] = rows
        metrics.update({f"{key}_{name}": value for name, value in m.items()})
        shown = f"pass@{spec.k}={m.get(f'pass_at_{spec.k}', 0.0):.3f} " if spec.k > 1 else ""
        log.info("evaluate %s: n=%d accuracy=%.3f %s(%.1f s)", key, m["n"], m["accuracy"], shown, time.time() - t0)
    return results, metrics
