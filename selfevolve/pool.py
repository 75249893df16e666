"""The question pool: the self-made curriculum.

The pool of cycle k is the pool of cycle k-1 plus the Challenger questions of cycle k that passed
the quality gate (Critic score >= alpha and a valid verifier spec), minus near-duplicates. The
pool of the ``base`` cycle is the seed set. Each question carries difficulty statistics from the
Solver samples of the cycle in which they were measured (``Question.measured``).

Near-duplicates: word n-gram Jaccard similarity >= ``dedup_threshold`` against any question
already kept (n-grams need no model).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from statistics import fmean

from selfevolve.records import Question


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Word (and digit) n-grams of a lowercased text; texts shorter than n give one short gram."""
    toks = re.findall(r"\w+|[^\w\s]", text.lower())
    if len(toks) < n:
        return {tuple(toks)} if toks else set()
    return {tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if (a or b) else 1.0


def dedup_against(pool: list[Question], new: list[Question], n: int = 3, threshold: float = 0.9) -> tuple[list[Question], list[Question]]:
    """Split ``new`` into (kept, duplicates): a question is a duplicate when its n-gram Jaccard
    similarity to a pool question or an earlier kept question is >= ``threshold``.

    Exact duplicates of the text are always duplicates. O(len(pool) * len(new)) comparisons,
    with an exact-text index first.
    """
    seen_text = {q.text.strip().lower() for q in pool}
    grams = [ngrams(q.text, n) for q in pool]
    kept, dups = [], []
    for q in new:
        g = ngrams(q.text, n)
        key = q.text.strip().lower()
        if key in seen_text or any(jaccard(g, h) >= threshold for h in grams):
            dups.append(q)
            continue
        kept.append(q)
        seen_text.add(key)
        grams.append(g)
    return kept, dups


def pool_stats(pool: list[Question]) -> dict:
    """Size, size by source and by level, and mean Solver pass rate where measured."""
    rates = [q.measured.pass_rate for q in pool if q.measured is not None]
    return {
        "size": len(pool),
        "by_source": dict(Counter(q.source.split(":")[0] for q in pool)),
        "by_level": {str(k): v for k, v in sorted(Counter(q.level for q in pool if q.level is not None).items())},
        "challenger_questions": sum(q.source == "challenger" for q in pool),
        "mean_pass_rate": fmean(rates) if rates else None,
        "measured": len(rates),
    }


def frontier_weights(questions: list[Question], band: tuple[float, float], boost: float) -> list[float]:
    """Sampling weight per question: ``boost`` for those on the Solver's frontier (a measured pass
    rate, ``measured.pass_rate``, inside ``band``), 1 for the rest (unmeasured, always or never solved).
    Drawing reference items and re-solved questions this way keeps the curriculum at the edge of
    what the Solver can do, where its successes teach it something (R-Zero, Huang et al. 2025; Lee
    et al. 2025)."""
    lo, hi = band
    out = []
    for q in questions:
        on = q.measured is not None and lo <= q.measured.pass_rate <= hi
        out.append(boost if on else 1.0)
    return out


def weighted_sample(rng: random.Random, items: list, weights: list[float], k: int) -> list:
    """``k`` distinct items drawn with probability proportional to ``weights`` (Efraimidis and
    Spirakis 2006: the ``k`` largest keys ``u ** (1 / w)``), in the order drawn; all of them when
    ``k >= len(items)``."""
    keyed = sorted(((rng.random() ** (1.0 / w), i) for i, w in enumerate(weights)), reverse=True)
    return [items[i] for _, i in keyed[: max(0, k)]]
