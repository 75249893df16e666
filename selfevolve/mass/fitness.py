"""Fitness of a workflow design (MASS ("Recursive Self-Improvement through Multi-Agent Self-Supervision", SakanaAI; reference code SakanaAI/mass)).

A design's fitness on a sample of questions is the mean per-run score: the verifier's outcome
(the injected ``VerifyFn``: math grader or code sandbox) or, for questions the verifier cannot decide
(``None``), a pairwise self-judgement against the single-agent reference run with the A/B order
swapped (``prompts/mass/judge.j2``; win 1, tie or unparseable 0.5, loss 0, averaged over both
orders); minus ``cost_weight`` x mean output tokens per run / 1000 when ``cost_weight`` > 0.
Reported beside it: accuracy per 1,000 output tokens (the reference's "performance per output
token").
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field

from selfevolve import prompting
from selfevolve.backends.base import Backend, SamplingConfig
from selfevolve.mass.design import DesignLimits, WorkflowDesign
from selfevolve.mass.executor import ExecutionResult, run_design
from selfevolve.records import Question, Trajectory
from selfevolve.roles.parsers import extract_tag
from selfevolve.verifiers.grading import VerifyFn


def render_prompt(name: str, **fields: Any) -> str:
    """Render ``selfevolve/prompts/mass/{name}.j2`` (``propose``, ``merge``, ``judge``)."""
    return prompting.render(f"mass/{name}", **fields)

def _clip(text: str | None, n: int) -> str:
    text = "" if text is None else " ".join(str(text).split())
    return text if len(text) <= n else text[: max(0, n - 3)] + "..."

class DesignEvaluation(BaseModel):
    """One design's measured fitness on the domain's evaluation sample.

    ``quality``: mean per-run score (verified outcome or judged preference); ``accuracy``: mean over
    verified runs (``None`` if none were verifiable); ``judged_score``: mean preference over the
    single-agent reference on unverifiable runs; ``fitness = quality - cost_weight * mean_output_tokens
    / 1000``; ``accuracy_per_1k_tokens = accuracy / (mean_output_tokens / 1000)``.
    """

    model_config = ConfigDict(extra="forbid")

    design: WorkflowDesign
    design_id: str
    domain: str
    generation: int
    origin: str
    fitness: float
    quality: float
    accuracy: float | None
    judged_score: float | None
    n_runs: int
    n_verified: int
    completed_rate: float
    mean_output_tokens: float
    accuracy_per_1k_tokens: float | None
    agent_output_tokens: dict[str, float] = Field(default_factory=dict)
    failures: list[dict[str, str]] = Field(default_factory=list)

# ----------------------------------------------------------------------------------------
# pairwise self-judgement
# ----------------------------------------------------------------------------------------
def _verdict(text: str) -> float:
    """1.0 if the judge picked A, 0.0 for B, 0.5 when unparseable. Never raises."""
    body = extract_tag(text, "answer")
    if not body:
        return 0.5
    body = body.strip().upper().removeprefix("RESPONSE").strip()
    if body.startswith("A"):
        return 1.0
    if body.startswith("B"):
        return 0.0
    return 0.5


def judge_pairs(backend: Backend, questions: Sequence[Question], a_texts: Sequence[str], b_texts: Sequence[str], *,
                max_model_len: int = 512, max_new_tokens: int = 16, seed: int | None = None,
                chars_per_token: float = 4.0) -> list[float]:
    """Preference for A over B per question in [0, 1], judged by the model itself with the order
    swapped: ``(v(A, B) + 1 - v(B, A)) / 2`` where ``v`` is 1 when the first-shown response wins,
    0 when the second does, 0.5 when unparseable. One batched call of 2 x B greedy prompts; the
    responses are clipped so the prompt fits ``max_model_len`` (characters / ``chars_per_token``)."""
    if not questions:
        return []
    convs = []
    for q, a, b in zip(questions, a_texts, b_texts):
        fixed = len(render_prompt("judge", question=q.text, a="", b=""))
        room_chars = max(0, int((max_model_len - max_new_tokens - 8) * chars_per_token) - fixed)
        a_c, b_c = _clip(a, room_chars // 2), _clip(b, room_chars // 2)
        convs.append([{"role": "user", "content": render_prompt("judge", question=q.text, a=a_c, b=b_c)}])
        convs.append([{"role": "user", "content": render_prompt("judge", question=q.text, a=b_c, b=a_c)}])
    cfg = SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens, n=1, seed=seed)
    out = backend.chat(convs, cfg)
    if len(out) != len(convs) or any(len(o) != 1 for o in out):
        raise RuntimeError(f"backend broke the Backend contract in judge_pairs: {len(convs)} prompts, got {len(out)}")
    return [(_verdict(out[2 * i][0].text) + 1.0 - _verdict(out[2 * i + 1][0].text)) / 2 for i in range(len(questions))]

# ----------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------
def _answer_text(traj: Trajectory, answer_agent: str) -> str:
    for m in reversed(traj.messages):
        if m.role == "assistant" and m.agent_id == answer_agent:
            return m.content
    return ""


def _check_scores(scores: Any, n: int) -> list[float | None]:
    if not isinstance(scores, (list, tuple)) or len(scores) != n:
        raise ValueError(f"verify_fn must return one score per question ({n}), got {type(scores).__name__} "
                         f"of length {len(scores) if hasattr(scores, '__len__') else '?'}")
    out: list[float | None] = []
    for s in scores:
        if s is None:
            out.append(None)
            continue
        s = float(s)
        out.append(None if not math.isfinite(s) else min(1.0, max(0.0, s)))
    return out


def verify_trajectories(trajs: list[Trajectory], questions: Sequence[Question], verify_fn: VerifyFn | None
                        ) -> list[float | None]:
    """Verifier scores for ``trajs`` (aligned with ``questions``); sets ``traj.correct`` in place.
    Incomplete runs score 0 (verifiable) without being sent to ``verify_fn``'s grader twice."""
    if verify_fn is None:
        return [None] * len(trajs)
    scores = _check_scores(verify_fn(list(questions), [t.final_answer if t.completed else None for t in trajs]), len(trajs))
    for t, s in zip(trajs, scores):
        t.correct = s
    return scores


def evaluate_design(backend: Backend, design: WorkflowDesign, questions: Sequence[Question], *,
                    verify_fn: VerifyFn | None, limits: DesignLimits, sampling: SamplingConfig, cost_weight: float = 0.0,
                    seed: int | None = None, generation: int = 0, reference: tuple[WorkflowDesign, ExecutionResult] | None = None,
                    check_limits: bool = True) -> tuple[DesignEvaluation, ExecutionResult]:
    """Run ``design`` once per question, verify, judge the unverifiable runs against ``reference``
    (the single-agent design and its runs on the same questions; no reference -> 0.5) and compute
    fitness. Returns the evaluation and the raw execution result."""
    res = run_design(backend, design, questions, limits=limits, sampling=sampling, seed=seed, check_limits=check_limits)
    trajs = res.trajectories
    scores = verify_trajectories(trajs, questions, verify_fn)
    unverified = [i for i, s in enumerate(scores) if s is None]
    judged: dict[int, float] = {}
    if unverified:
        if reference is None or reference[0].design_id == design.design_id:
            judged = {i: 0.5 for i in unverified}
        else:
            ref_design, ref_res = reference
            prefs = judge_pairs(backend, [questions[i] for i in unverified],
                                [_answer_text(trajs[i], design.answer) for i in unverified],
                                [_answer_text(ref_res.trajectories[i], ref_design.answer) for i in unverified],
                                max_model_len=limits.max_model_len, seed=seed, chars_per_token=limits.chars_per_token)
            judged = dict(zip(unverified, prefs))
    per_run = [s if s is not None else judged[i] for i, s in enumerate(scores)]
    n = len(trajs)
    tokens = [t.output_tokens for t in trajs]
    mean_tokens = sum(tokens) / n if n else 0.0
    verified = [s for s in scores if s is not None]
    accuracy = sum(verified) / len(verified) if verified else None
    quality = sum(per_run) / n if n else 0.0
    agent_tokens: dict[str, float] = {}
    for t in trajs:
        for m in t.messages:
            if m.role == "assistant":
                agent_tokens[m.agent_id] = agent_tokens.get(m.agent_id, 0.0) + m.output_tokens / n
    failures = []
    for i, t in enumerate(trajs):
        if per_run[i] >= 1.0 or (scores[i] is None and per_run[i] >= 0.5):
            continue
        if not t.completed:
            status = f"incomplete ({res.stop_reasons[i]})"
        elif scores[i] is None:
            status = "judged worse than a single agent"
        else:
            status = "wrong" if t.final_answer else "no <answer>"
        failures.append({"question": _clip(questions[i].text, 120), "answer": _clip(t.final_answer or "(none)", 60),
                         "status": status})
    ev = DesignEvaluation(
        design=design, design_id=design.design_id, domain=design.domain, generation=generation, origin=design.origin,
        fitness=quality - cost_weight * mean_tokens / 1000.0, quality=quality, accuracy=accuracy,
        judged_score=(sum(judged.values()) / len(judged)) if judged else None, n_runs=n, n_verified=len(verified),
        completed_rate=(sum(t.completed for t in trajs) / n) if n else 0.0, mean_output_tokens=mean_tokens,
        accuracy_per_1k_tokens=(accuracy / (mean_tokens / 1000.0)) if accuracy is not None and mean_tokens > 0 else None,
        agent_output_tokens={k: round(v, 2) for k, v in agent_tokens.items()}, failures=failures[:5],
    )
    return ev, res


def greedy_runs(backend: Backend, design: WorkflowDesign, questions: Sequence[Question], *, verify_fn: VerifyFn | None,
                limits: DesignLimits, seed: int | None = None) -> tuple[DesignEvaluation | None, list[Trajectory]]:
    """``design`` run once per question greedily (temperature 0, at most ``limits.max_new_tokens``
    tokens a call: the one budget the sampler and the executor's per-call cap both read), the other
    limits recorded but not enforced, as every measurement after the search runs a design (the
    ``evaluate`` stage's champion-vs-single-agent check, the distillation's probes, the compounding
    benchmark): :func:`evaluate_design`'s evaluation and the verified runs, aligned with
    ``questions`` (``Trajectory.correct`` is the verifier's verdict). No questions: no model call,
    ``(None, [])``."""
    if not questions:
        return None, []
    ev, res = evaluate_design(backend, design, questions, verify_fn=verify_fn, limits=limits,
                              sampling=SamplingConfig(temperature=0.0, max_new_tokens=limits.max_new_tokens), seed=seed, check_limits=False)
    return ev, res.trajectories
