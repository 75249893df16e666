"""SAGE rewards per role (docs/design.md 'Rewards', from the SAGE paper).

All constants come from ``SageParams`` (params.yaml ``sage``). Inputs are floats in [0, 1];
outputs are floats in [0, 1].

* Challenger: difficulty ``r_d`` from the pass rate ``p`` of the n Solver samples:
  ``sage``: ``r_d = 1 - p`` (the SAGE paper), or ``uncertainty``: ``r_d = 1 - 2 |p - 0.5|``
  (R-Zero, Huang et al. 2025: highest where the Solver succeeds half the time, i.e. at the frontier;
  0 for questions it always or never solves). Valid verifier spec and ``s_q >= alpha``:
  ``r_c = (s_q + r_d + r_f) / 3``; valid spec below the quality gate: ``r_c = (s_q + r_f) / 3``;
  invalid spec: ``r_c = 0``. The order is the point: valid and at the frontier > valid but trivial
  or impossible >= gated out > invalid. (An earlier ``(s_q + r_f) / 2`` for every failed gate paid a
  question with a wrong reference answer more than a valid one: measured, 45 of 48 Challenger
  questions of a cycle had invalid specs and earned 0.96 on average against 0.74 for the valid ones,
  and RL reinforced wrong arithmetic.)
* Planner: ``r_p = w_p * s_p + (1 - w_p) * r_f`` (w_p = 0.5).
* Solver: ``r_s = w_plan * s~_p + w_gt * s_gt + w_f * r_f`` with ``s~_p = s_p if s_p >= beta else 0``
  (0.2 / 0.6 / 0.2).
* Critic: ``r_cr = r_f``.
"""

from __future__ import annotations

from statistics import fmean
from typing import Sequence

from selfevolve.config import SageParams


def difficulty(solver_correct: Sequence[float], kind: str = "sage") -> float:
    """``r_d`` from the Solver's correctness on the n samples (see the module docstring):
    ``sage`` ``1 - p``, ``uncertainty`` ``1 - 2 |p - 0.5|``. With no samples: 1.0 (``sage``, the
    hardest) or 0.0 (``uncertainty``: nothing known about the frontier). Raises ``ValueError`` for
    another ``kind``."""
    if kind not in ("sage", "uncertainty"):
        raise ValueError(f"unknown difficulty reward {kind!r}; expected 'sage' or 'uncertainty'")
    if not solver_correct:
        return 1.0 if kind == "sage" else 0.0
    p = fmean(solver_correct)
    return 1.0 - p if kind == "sage" else 1.0 - 2.0 * abs(p - 0.5)


def question_passes_gate(s_q: float, spec_valid: bool, p: SageParams) -> bool:
    """The quality gate: the Critic's score reaches ``alpha`` and the verifier spec is valid."""
    return spec_valid and s_q >= p.alpha


def challenger_reward(s_q: float, r_f: float, spec_valid: bool, solver_correct: Sequence[float], p: SageParams,
                      scored: bool = True) -> float:
    """``r_c`` (see module docstring; ``p.difficulty_reward`` picks ``r_d``). ``solver_correct`` is
    ignored when the gate fails; a question the Critic gave no parseable score (``scored`` false)
    fails the gate, whatever ``s_q`` it counts as."""
    if not spec_valid:
        return 0.0
    if scored and question_passes_gate(s_q, spec_valid, p):
        return (s_q + difficulty(solver_correct, p.difficulty_reward) + r_f) / 3.0
    return (s_q + r_f) / 3.0


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
