"""SAGE reward formulas against hand-computed values (docs/design.md, "Rewards"), including both gates."""

import pytest

from selfevolve import rewards as R
from selfevolve.config import SageParams

P = SageParams(difficulty_reward="sage")
U = SageParams(difficulty_reward="uncertainty")


def test_difficulty():
    assert R.difficulty([1, 0, 0, 0, 1]) == pytest.approx(0.6)
    assert R.difficulty([]) == 1.0
    # R-Zero's uncertainty: 1 at p = 0.5, 0 at p = 0 or 1
    assert R.difficulty([1, 0], "uncertainty") == 1.0
    assert R.difficulty([1, 1, 1, 1], "uncertainty") == R.difficulty([0, 0], "uncertainty") == 0.0
    assert R.difficulty([1, 0, 0, 0], "uncertainty") == pytest.approx(0.5)
    with pytest.raises(ValueError):
        R.difficulty([1], "hardness")


def test_challenger_quality_gate():
    # passes the gate (s_q >= 0.7, valid spec): (s_q + r_d + r_f) / 3
    assert R.challenger_reward(0.8, 1.0, True, [1, 0, 0, 0, 0], P) == pytest.approx((0.8 + 0.8 + 1.0) / 3)
    # exactly at alpha passes
    assert R.challenger_reward(0.7, 0.5, True, [1, 1], P) == pytest.approx((0.7 + 0.0 + 0.5) / 3)
    # valid spec below alpha: (s_q + r_f) / 3, however hard
    assert R.challenger_reward(0.6, 1.0, True, [0, 0, 0], P) == pytest.approx(1.6 / 3)
    # invalid spec: nothing
    assert R.challenger_reward(0.9, 1.0, False, [0, 0, 0], P) == 0.0


@pytest.mark.parametrize("params", [P, U])
def test_challenger_reward_is_monotone_in_validity_and_difficulty(params):
    """valid and at the frontier > valid but trivial >= gated out > invalid, whatever the Critic
    and format scores (the inversion that paid wrong references more than right ones)."""
    for s_q_pass in (0.7, 0.85, 1.0):
        for r_f in (0.0, 0.5, 1.0):
            frontier = R.challenger_reward(s_q_pass, r_f, True, [1, 0, 1, 0], params)
            trivial = R.challenger_reward(s_q_pass, r_f, True, [1, 1, 1, 1], params)
            gated = R.challenger_reward(0.69, r_f, True, [1, 0, 1, 0], params)
            invalid = R.challenger_reward(1.0, 1.0, False, [1, 0, 1, 0], params)
            assert trivial >= gated
            assert frontier > trivial and frontier > gated > invalid == 0.0


def test_planner():
    assert R.planner_reward(0.6, 1.0, P) == pytest.approx(0.8)


def test_solver_plan_gate():
    # s_p >= beta: 0.2 s_p + 0.6 s_gt + 0.2 r_f
    assert R.solver_reward(0.5, 1.0, 1.0, P) == pytest.approx(0.2 * 0.5 + 0.6 + 0.2)
    # s_p < beta: plan term is 0
    assert R.solver_reward(0.29, 1.0, 1.0, P) == pytest.approx(0.8)
    assert R.solver_reward(None, 0.0, 0.5, P) == pytest.approx(0.1)
    assert R.plan_shown(0.3, P) and not R.plan_shown(0.2999, P) and not R.plan_shown(None, P)


def test_critic():
    assert R.critic_reward(0.5) == 0.5


def test_constants_come_from_params():
    p = SageParams(alpha=0.9, beta=0.5, solver_plan_weight=0.1, solver_correct_weight=0.8, solver_format_weight=0.1)
    assert R.challenger_reward(0.8, 1.0, True, [0], p) == pytest.approx(0.6)  # 0.8 < 0.9 -> gate fails
    assert R.solver_reward(0.4, 1.0, 1.0, p) == pytest.approx(0.9)  # 0.4 < 0.5 -> plan term 0
