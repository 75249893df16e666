"""SAGE rewards per role (docs/design.md 'Rewards', from the SAGE paper).

All constants come from ``SageParams`` (params.yaml ``sage``). Inputs are floats in [0, 1];
outputs are floats in [0, 1].

* Challenger: ``r_d = 1 - mean(s_gt over n solver samples)``;
  if ``s_q >= alpha`` and the verifier spec is valid: ``r_c = (s_q + r_d + r_f) / 3``,
  otherwise ``r_c = (s_q + r_f) / 2`` (no reward for being hard when bad).
* Planner: ``r_p = w_p * s_p + (1 - w_p) * r_f`` (w_p = 0.5).
* Solver: ``r_s = w_plan * s~_p + w_gt * s_gt + w_f * r_f`` with ``s~_p = s_p if s_p >= beta else 0``
  (0.2 / 0.6 / 0.2).
* Critic: ``r_cr = r_f``.
"""

from __future__ import annotations

from statistics import fmean
from typing import Sequence

from selfevolve.config import SageParams


def difficulty(solver_correct: Sequence[float]) -> float:
    """``r_d = 1 - mean solver correctness`` over the n samples; 1.0 (hardest) with no samples."""
    return 1.0 - fmean(solver_correct) if solver_correct else 1.0


def question_passes_gate(s_q: float, spec_valid: bool, p: SageParams) -> bool:
    """The quality gate: the Critic's score reaches ``alpha`` and the verifier spec is valid."""
    return spec_valid and s_q >= p.alpha


def challenger_reward(s_q: float, r_f: float, spec_valid: bool, solver_correct: Sequence[float], p: SageParams) -> float:
    """``r_c`` (see module docstring). ``solver_correct`` is ignored when the gate fails."""
    if question_passes_gate(s_q, spec_valid, p):
        return (s_q + difficulty(solver_correct) + r_f) / 3.0
    return (s_q + r_f) / 2.0


def planner_reward(s_p: float, r_f: float, p: SageParams) -> float:
    """``r_p = w * s_p + (1 - w) * r_f`` with ``w = planner_score_weight`` (0.5)."""
    return p.planner_score_weight * s_p + (1.0 - p.planner_score_weight) * r_f


def plan_shown(s_p: float | None, p: SageParams) -> bool:
    """The plan gate: the Solver sees the plan only if ``s_p >= beta``."""
    return s_p is not None and s_p >= p.beta


def solver_reward(s_p: float | None, s_gt: float, r_f: float, p: SageParams) -> float:
    """``r_s = 0.2 * s~_p + 0.6 * s_gt + 0.2 * r_f``, ``s~_p = s_p`` if ``s_p >= beta`` else 0
    (``s_p`` None when no plan was written, e.g. the no-Planner ablation)."""
    gated = s_p if plan_shown(s_p, p) else 0.0
    return p.solver_plan_weight * gated + p.solver_correct_weight * s_gt + p.solver_format_weight * r_f


def critic_reward(r_f: float) -> float:
    """``r_cr = r_f``: the Critic's judgement itself is trained through the shared backbone."""
    return r_f
