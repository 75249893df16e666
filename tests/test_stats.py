"""Exact McNemar test against hand-computed binomial tails."""

import pytest

from selfevolve.stats import mcnemar_exact


def test_mcnemar_matches_the_binomial_tail_by_hand():
    # 10 questions fixed, 2 broken, 88 unchanged: p = 2 * P(X <= 2 | n=12, 1/2) = 2 * (1 + 12 + 66) / 4096
    before = [0] * 10 + [1] * 2 + [1] * 44 + [0] * 44
    after = [1] * 10 + [0] * 2 + [1] * 44 + [0] * 44
    p, b, c = mcnemar_exact(before, after)
    assert (b, c) == (10, 2) and p == pytest.approx(2 * 79 / 4096)
    assert mcnemar_exact(after, before)[0] == pytest.approx(p)  # symmetric
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]) == (1.0, 0, 0)  # no discordant pair: no evidence
    assert mcnemar_exact([0] * 5, [1] * 5)[0] == pytest.approx(2 / 32)


def test_mcnemar_rejects_unpaired_outcomes():
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_exact([1, 0], [1])
