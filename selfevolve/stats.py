"""Statistics of graded outcomes: the unbiased pass@k estimator and the exact McNemar test of paired
outcomes (accuracy changes on the same questions)."""

from __future__ import annotations

from typing import Sequence


def mcnemar_exact(before: Sequence[int | bool], after: Sequence[int | bool]) -> tuple[float, int, int]:
    """Exact two-sided McNemar test (McNemar 1947) on paired 0/1 outcomes of the same questions.

    Only discordant pairs carry information: ``b`` = questions wrong before and right after,
    ``c`` = right before and wrong after. Under no change, b ~ Binomial(b + c, 1/2); the p-value is
    the two-sided exact binomial test (``scipy.stats.binomtest``), 1.0 when b + c = 0.

    Returns ``(p_value, b, c)``. Raises ``ValueError`` if the sequences differ in length.
    """
    from scipy.stats import binomtest

    if len(before) != len(after):
        raise ValueError(f"paired outcomes differ in length: {len(before)} vs {len(after)}")
    b = sum(1 for x, y in zip(before, after) if not x and y)
    c = sum(1 for x, y in zip(before, after) if x and not y)
    return (1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)), b, c


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one question with ``n`` samples of which ``c`` are correct
    (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``, computed as a stable product.
    Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod
