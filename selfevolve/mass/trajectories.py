"""Champion trajectories for SFT: run the MASS champion many times and keep the verified runs.

As in the reference (SakanaAI/mass ``training/prepare_sft_data.py``): run the champion design many
times per question and keep completed runs. Where the reference ranks the kept runs by pairwise
self-judgement, we have verifiers: a run is kept when it completed *and* the verifier accepted its
final answer. ``selfevolve.mass.sft_data`` turns the kept runs into chats.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from selfevolve.backends.base import Backend, SamplingConfig
from selfevolve.mass.design import DesignLimits, WorkflowDesign
from selfevolve.mass.executor import run_design
from selfevolve.mass.fitness import verify_trajectories
from selfevolve.records import Question, Trajectory
from selfevolve.verifiers.grading import VerifyFn


def collect_champion_trajectories(backend: Backend, champions: Mapping[str, WorkflowDesign], questions: Sequence[Question],
                                  verify_fn: VerifyFn | None, *, samples: int = 2,
                                  limits: DesignLimits | Mapping[str, DesignLimits] | None = None,
                                  sampling: SamplingConfig | None = None, seed: int | None = 0) -> list[Trajectory]:
    """Run each domain's champion ``samples`` times (``MassParams.trajectories_per_question``) on that
    domain's questions and verify the final answers (``traj.correct`` set; ``None`` when the
    verifier cannot decide). Questions of a domain without a champion are skipped.

    Returns every trajectory, question-major per domain (filter with :func:`select_for_sft`).
    ``limits``: one ``DesignLimits`` or domain -> limits (``SearchResult.limits``). Sampling defaults
    to temperature 1.0 so the samples differ. The champion passed the guardrails during the search;
    here only the run-time limits apply (questions may be longer than the search's sample)."""
    out: list[Trajectory] = []
    for domain in sorted(champions):
        qs = [q for q in questions if q.domain == domain]
        if not qs:
            continue
        lim = limits.get(domain) if isinstance(limits, Mapping) else limits
        lim = lim or DesignLimits()
        cfg = sampling or SamplingConfig(temperature=1.0, max_new_tokens=lim.max_new_tokens)
        res = run_design(backend, champions[domain], qs, limits=lim, sampling=cfg, samples=samples, seed=seed,
                         check_limits=False)
        expanded = [q for q in qs for _ in range(samples)]
        verify_trajectories(res.trajectories, expanded, verify_fn)
        out += res.trajectories
    return out


def select_for_sft(trajs: Sequence[Trajectory], min_correct: float = 1.0) -> list[Trajectory]:
    """Completed runs whose verified score is at least ``min_correct`` (unverified runs are dropped)."""
    return [t for t in trajs if t.completed and t.correct is not None and t.correct >= min_correct]
