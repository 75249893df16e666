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
from itertools import accumulate
from statistics import fmean

from selfevolve.records import Question

#: ``Question.source`` of the questions :func:`next_rung_questions` draws.
NEXT_RUNG_SOURCE = "environment:next-rung"


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


def on_frontier(q: Question, band: tuple[float, float]) -> bool:
    """Whether the Solver's measured pass rate on ``q`` (``measured.pass_rate``) lies inside
    ``band`` (inclusive); False for an unmeasured question."""
    return q.measured is not None and band[0] <= q.measured.pass_rate <= band[1]


def frontier_weights(questions: list[Question], band: tuple[float, float], boost: float) -> list[float]:
    """Sampling weight per question: ``boost`` for those on the Solver's frontier (a measured pass
    rate, ``measured.pass_rate``, inside ``band``), 1 for the rest (unmeasured, always or never solved).
    Drawing reference items and re-solved questions this way keeps the curriculum at the edge of
    what the Solver can do, where its successes teach it something (R-Zero, Huang et al. 2025; Lee
    et al. 2025)."""
    return [boost if on_frontier(q, band) else 1.0 for q in questions]


def weighted_sample(rng: random.Random, items: list, weights: list[float], k: int) -> list:
    """``k`` distinct items drawn with probability proportional to ``weights`` (Efraimidis and
    Spirakis 2006: the ``k`` largest keys ``u ** (1 / w)``), in the order drawn; all of them when
    ``k >= len(items)``."""
    keyed = sorted(((rng.random() ** (1.0 / w), i) for i, w in enumerate(weights)), reverse=True)
    return [items[i] for _, i in keyed[: max(0, k)]]


def where_designs_differ(rng: random.Random, pool: list[Question], band: tuple[float, float], k: int) -> list[Question]:
    """``k`` distinct pool questions for the search: up to half on the Solver's frontier (a measured
    pass rate inside ``band``: ``pool.on_frontier``), the rest beyond it (measured, below the band:
    one pass never solves them), each drawn uniformly; then, if those run out, the other questions.
    The fitness is verified accuracy where designs differ. Measured: drawn uniformly the questions
    were nearly all seed forms every design solves, and a champion chosen on them lost to the single
    agent on held-out (0.03 against 0.175); drawn with the frontier 8x likelier two thirds were still
    always solved and ties kept the single agent; on the frontier alone the split workflow, which
    reaches 5- and 6-digit sums, lost to one pass (greedy, 32 questions: 0.81 against 0.875 and
    0.72 against 0.91; docs/measurements.md, "December 5 (evening)")."""
    on = [q for q in pool if on_frontier(q, band)]
    beyond = [q for q in pool if q.measured is not None and q.measured.pass_rate < band[0]]
    picked = rng.sample(on, min(len(on), k // 2))
    picked += rng.sample(beyond, min(len(beyond), k - len(picked)))
    taken = {q.id for q in picked}
    rest = [q for q in pool if q.id not in taken]
    return picked + rng.sample(rest, min(len(rest), k - len(picked)))


def form_pass_rates(questions: list[Question], min_samples: int = 1) -> dict[str, float]:
    """Per question form (``Question.form``, e.g. ``"4+3"``): the Solver's pass rate over every
    measured attempt at the form's questions (each question's ``measured.pass_rate`` weighted by its
    ``samples``), for the forms with at least ``min_samples`` attempts. Questions without a form or
    a measurement are left out."""
    hits: dict[str, float] = Counter()
    samples: dict[str, int] = Counter()
    for q in questions:
        if q.form and q.measured is not None:
            hits[q.form] += q.measured.pass_rate * q.measured.samples
            samples[q.form] += q.measured.samples
    return {f: hits[f] / samples[f] for f in samples if samples[f] >= min_samples}


def edge_groups(questions: list[Question], band: tuple[float, float], min_samples: int = 16) -> list[list[Question]]:
    """The questions at the Solver's edge, from which a Challenger's step up lands one rung beyond
    what it masters, grouped by form: the forms on its frontier (the form's pass rate in ``band``, as
    the self-labels count them) and the forms of the hardest rung it solves at all (the largest
    ``arith.rung_size`` among forms whose pass rate is at least ``band[0]``); a question without a
    form (other seed sets) is a group of its own when its pass rate is in ``band``. The rung rule is
    that of Lee et al. 2025 ("Self-Improving Transformers Overcome Easy-to-Hard and Length
    Generalization Challenges", sec. 3): each round's questions are one step longer than the longest
    the model already solves. A form counts with ``min_samples`` attempts or more (four questions of
    four samples by default), so that one lucky answer does not move the edge. Measured on the
    embedded default's campaigns (docs/measurements.md, "December 3 (night 2)"): drawn by
    ``frontier_weights`` alone, 80-88 % of c2's reference items were seed forms the Solver answered
    ~99 % of the time, and 1-22 of ~1,400 Challenger questions were 4+4."""
    lo, hi = band
    rates = form_pass_rates(questions, min_samples)
    edge = {f for f, p in rates.items() if lo <= p <= hi} | _hardest_solved(rates, lo)
    groups: dict[str, list[Question]] = {}
    for q in questions:
        if q.form in edge or (not q.form and on_frontier(q, band)):
            groups.setdefault(q.form or q.id, []).append(q)
    return list(groups.values())


def _hardest_solved(rates: dict[str, float], lo: float) -> set[str]:
    """The forms of the hardest rung (largest ``arith.rung_size``) among ``rates``' forms solved at
    least ``lo`` of the time; empty when none is."""
    from selfevolve.questions.arith import rung_size

    solved = {f: rung_size(f) for f, p in rates.items() if p >= lo}
    top = max(solved.values(), default=None)
    return {f for f, rung in solved.items() if rung == top}


def next_rung_forms(questions: list[Question], band: tuple[float, float], min_samples: int = 16) -> list[str]:
    """The forms one rung beyond the Solver's edge: every ``arith.longer_forms`` of the hardest rung's
    forms that :func:`edge_groups` counts (pass rate at least ``band[0]`` over ``min_samples``
    attempts or more), sorted; empty when nothing is measured. A longer form no easier than one
    already measured at zero (no right answer in ``min_samples`` attempts or more; "no easier": the
    same operator and every operand at least as long, so 6+4 after 6+3) is left out while another
    longer form is not, so the budget goes where a label can come from; when every one is, all are
    kept. For seed 1 of the embedded default at c4-c6 (hardest rung 8 digits: 4+4, 5+3, 3+5) this is
    4+5, 5+4, 3+6, 6+3, the rung its Challenger did not reach by itself (docs/measurements.md,
    "December 4 (evening)"); 3+6 and 6+3 were answered right in 0 of ~1,600 samples in every seed
    and cycle ("December 4 (night)"), and 6+4, 4+6, 6+5 after them ("December 4 (late)")."""
    from selfevolve.questions.arith import longer_forms, no_easier

    rates = form_pass_rates(questions, min_samples)
    longer = {g for f in _hardest_solved(rates, band[0]) for g in longer_forms(f)}
    unsolved = [f for f, p in rates.items() if p == 0]
    reachable = {g for g in longer if not any(no_easier(g, f) for f in unsolved)}
    return sorted(reachable or longer)


def reference_items(rng: random.Random, pool: list[Question], k: int, band: tuple[float, float], boost: float,
                    edge_share: float) -> list[Question]:
    """``k`` reference items for the Challenger, drawn with replacement: each, with probability
    ``edge_share``, from the :func:`edge_groups` (a group uniformly, then one of its questions), else
    from the whole pool by :func:`frontier_weights`. With no edge (nothing measured yet) or
    ``edge_share`` 0 every item is drawn by the weights, the same draws as
    ``rng.choices(pool, weights, k=k)``."""
    cum_weights = list(accumulate(frontier_weights(pool, band, boost)))  # what rng.choices(weights=) sums per call
    edge = edge_groups(pool, band) if edge_share > 0 else []
    if not edge:
        return rng.choices(pool, cum_weights=cum_weights, k=k)
    return [rng.choice(rng.choice(edge)) if rng.random() < edge_share else rng.choices(pool, cum_weights=cum_weights)[0]
            for _ in range(k)]


def next_rung_questions(rng: random.Random, pool: list[Question], band: tuple[float, float], n: int, prefix: str
                        ) -> list[Question]:
    """``n`` fresh questions the environment draws one rung past the Solver's edge (a form of
    :func:`next_rung_forms` uniformly, then its operands; ids ``<prefix>0000`` ..., source
    :data:`NEXT_RUNG_SOURCE`, exact answers for the verifier only); none when nothing is measured.
    The rung rule of Lee et al. 2025 (sec. 3: each round's inputs one digit longer than the longest
    the model solves, labelled by the model itself): they join the cycle's solve set, the Solver's
    verified answers to them are its self-labels like any other, and they join the pool with their
    pass rates, so the edge can move past what the Challenger writes (docs/measurements.md,
    "December 4 (evening)": shown a 9-digit reference, the embedded Challenger writes 6-7 digits)."""
    from selfevolve.questions.arith import make_question

    forms = next_rung_forms(pool, band) if n > 0 else []
    return [make_question(rng, rng.choice(forms), f"{prefix}{i:04d}", source=NEXT_RUNG_SOURCE)
            for i in range(n)] if forms else []
