"""Greedy (or sampled) Solver accuracy on a list of questions: the one routine that checkpoint
selection (``train_rl``), the ``evaluate`` stage and benchmarks share.

The prompt is the Solver role's template without a plan; answers are parsed with the Solver
parser and checked by the external verifiers.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from selfevolve.backends.base import Backend, SamplingConfig
from selfevolve.config import Params
from selfevolve.records import Question
from selfevolve.roles import parsers
from selfevolve.roles.templates import messages
from selfevolve.verifiers.grading import pass_at_k


def solve_and_grade(backend: Backend, questions: list[Question], params: Params, n: int = 1, temperature: float = 0.0,
                    max_new_tokens: int | None = None, seed: int = 0) -> tuple[list[dict], dict]:
    """Solve every question ``n`` times and verify.

    Returns (rows, metrics). ``rows``: one dict per question with ``id``, ``level``, ``domain``,
    ``completions``, ``answers``, ``correct`` (list of 0/1). ``metrics``: ``n``, ``accuracy``
    (mean over all samples), ``pass_at_1``, ``pass_at_<n>`` when n > 1, and ``accuracy_level_<L>``
    (names MLflow accepts as metric keys).
    """
    from selfevolve.stages.common import verify_answers

    if not questions:
        return [], {"n": 0, "accuracy": 0.0}
    sp = SamplingConfig(temperature=temperature, top_p=1.0 if temperature == 0 else params.sampling.top_p,
                        max_new_tokens=max_new_tokens or params.evaluation.max_new_tokens, n=n, seed=seed)
    comps = backend.chat([messages("solver", question=q.text, domain=q.domain, plan=None) for q in questions], sp)
    flat_q, flat_a = [], []
    for q, cs in zip(questions, comps):
        for c in cs:
            flat_q.append(q)
            flat_a.append(parsers.parse_solver(c.text, q.domain).answer)
    verdicts = verify_answers(flat_q, flat_a, params, ids=[f"{q.id}-{i}" for i, q in enumerate(flat_q)])
    rows, i = [], 0
    for q, cs in zip(questions, comps):
        vs = verdicts[i:i + len(cs)]
        rows.append({"id": q.id, "level": q.level, "domain": q.domain, "completions": [c.text for c in cs],
                     "answers": flat_a[i:i + len(cs)], "correct": [v.correct for v in vs], "status": [v.status for v in vs],
                     "output_tokens": [c.output_tokens for c in cs]})
        i += len(cs)
    metrics = {"n": len(rows), "accuracy": fmean(c for r in rows for c in r["correct"]),
               "pass_at_1": fmean(pass_at_k(len(r["correct"]), int(sum(r["correct"])), 1) for r in rows),
               "mean_output_tokens": fmean(t for r in rows for t in r["output_tokens"])}
    if n > 1:
        metrics[f"pass_at_{n}"] = fmean(pass_at_k(n, int(sum(r["correct"])), n) for r in rows)
    by_level = defaultdict(list)
    for r in rows:
        if r["level"] is not None:
            by_level[r["level"]].extend(r["correct"])
    for lvl, cs in sorted(by_level.items()):
        metrics[f"accuracy_level_{lvl}"] = fmean(cs)
    return rows, metrics
