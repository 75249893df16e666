"""Shared plumbing of the stage entry points: params, paths, the model a cycle starts from,
sampling settings, seeded RNGs and the verifier dispatch (math grader or code sandbox)."""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path

from selfevolve.backends.base import SamplingConfig
from selfevolve.config import Params
from selfevolve.paths import CyclePaths, cycle_paths
from selfevolve.records import CodeSpec, MathSpec, Question, Verdict

log = logging.getLogger("selfevolve")


def stage_seed(params: Params, cycle: str, stage: str) -> int:
    """A seed derived from (params.seed, cycle, stage): every stage is reproducible on its own."""
    h = hashlib.sha256(f"{params.seed}/{cycle}/{stage}".encode()).hexdigest()
    return int(h[:8], 16)


def stage_rng(params: Params, cycle: str, stage: str) -> random.Random:
    return random.Random(stage_seed(params, cycle, stage))


def init_paths(params: Params, cycle: str, root: str | Path) -> CyclePaths:
    """Paths of the cycle this one starts from (``base`` for the first)."""
    params.cycle_index(cycle)  # raises KeyError on an unknown cycle
    return cycle_paths(params.cycles[cycle].init, root)


EMBEDDED = "models/base"


def base_model(params: Params, root: str | Path) -> str:
    """The campaign's starting model: the embedded tiny model at ``models/base`` (default), or the
    local path / hub id in ``params.model.base`` (a preset such as configs/qwen2.5-7b-vllm.yaml)."""
    if params.model.base == EMBEDDED:
        return str(Path(root) / EMBEDDED)
    local = Path(params.model.base) if Path(params.model.base).is_absolute() else Path(root) / params.model.base
    return str(local) if local.exists() else params.model.base


def init_model_dir(params: Params, cycle: str, root: str | Path) -> str | Path:
    """The model a cycle's generation stages use: ``models/<init>``, or the base model."""
    init = params.cycles[cycle].init
    if init == "base":
        return base_model(params, root)
    return cycle_paths(init, root).model


def make_backend(params: Params, model_dir: str | Path):
    from selfevolve.backends import make_backend as _make

    return _make(params.model, model_path=str(model_dir))


def sampling(params: Params, seed: int, n: int = 1, temperature: float | None = None, max_new_tokens: int | None = None) -> SamplingConfig:
    s = params.sampling
    return SamplingConfig(
        temperature=s.temperature if temperature is None else temperature,
        top_p=s.top_p,
        max_new_tokens=max_new_tokens or s.max_new_tokens,
        n=n,
        seed=seed,
    )


def verify_answers(questions: list[Question], answers: list[str | None], params: Params, ids: list[str] | None = None) -> list[Verdict]:
    """Verify one answer per question with the external verifiers (never the model).

    Math: the answer text is graded against ``spec.answer`` by the math verifier (process pool with
    hard time limits). Code: the answer program runs in the sandbox against ``spec.tests`` /
    ``spec.io_cases``. A missing answer is wrong with status ``no_answer``. Returns one ``Verdict``
    per input, in order (``attempt_id`` from ``ids`` when given).
    """
    ids = ids or [q.id for q in questions]
    out: list[Verdict | None] = [None] * len(questions)
    math_idx, code_idx = [], []
    for i, (q, a) in enumerate(zip(questions, answers)):
        if not a:
            out[i] = Verdict(attempt_id=ids[i], question_id=q.id, correct=0.0, status="no_answer", detail="no <answer> in the completion")
        elif isinstance(q.spec, MathSpec):
            math_idx.append(i)
        else:
            code_idx.append(i)
    v = params.verifiers
    if math_idx:
        from selfevolve.verifiers.math import grade_math_batch

        grades = grade_math_batch([(questions[i].spec.answer, answers[i]) for i in math_idx], timeout_s=v.math_timeout_s, workers=v.workers)
        for i, g in zip(math_idx, grades):
            out[i] = Verdict(attempt_id=ids[i], question_id=questions[i].id, correct=float(g.correct), status=g.status, detail=g.detail[:300])
    if code_idx:
        from selfevolve.verifiers.sandbox import CodeJob, run_tests_batch

        jobs = []
        for i in code_idx:
            spec: CodeSpec = questions[i].spec  # type: ignore[assignment]
            jobs.append(CodeJob(program=answers[i], tests=spec.tests, setup=spec.setup, io_cases=spec.io_cases,
                                timeout_s=v.code_timeout_s, memory_mb=v.code_memory_mb))
        for i, r in zip(code_idx, run_tests_batch(jobs, workers=v.workers)):
            failed = [t for t in r.tests if not t.passed][:1]
            detail = failed[0].error if failed and failed[0].error else r.stderr_tail[-300:]
            out[i] = Verdict(attempt_id=ids[i], question_id=questions[i].id, correct=float(r.passed), status=r.status, detail=(detail or "")[:300])
    return out  # type: ignore[return-value]
