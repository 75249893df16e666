"""A campaign's seed set split three ways: the pool of the ``base`` cycle (what the Challenger
draws reference items from), validation questions (checkpoint selection) and held-out questions
(evaluation), with no question text in two of them."""

from __future__ import annotations

from pathlib import Path

from selfevolve.config import Params
from selfevolve.inputs import InputError
from selfevolve.records import Question


def _disjoint(questions: list[Question], taken: set[str]) -> list[Question]:
    out = []
    for q in questions:
        if q.text not in taken:
            taken.add(q.text)
            out.append(q)
    return out


def load_seed_set(params: Params, root: str | Path = ".") -> tuple[list[Question], list[Question], list[Question]]:
    """(seed pool, validation, held-out) for ``params.seeds.set``; texts never repeat across the three.

    * ``arith``: generated from the ladder (``seeds.arith``): the pool holds seed forms only; validation
      and held-out hold ``val_size`` / ``heldout_size`` questions of the seed forms (``split``
      ``seed``: retention), as many of the frontier forms (``frontier``: never supervised) and as
      many of the rungs beyond it (``beyond``: ``seeds.arith.reach_levels``, never supervised).
    * ``tiny-code``: generated small Python functions with assert tests.
    * ``paper``: GSM8K train, MATH train, HumanEval and MBPP train items (SAGE paper, 500 by
      default) from ``seeds.data_dir``; validation from MBPP validation ids + GSM8K train, held-out
      from GSM8K test and MATH-500.
    * a ``.jsonl``/``.json`` file (relative to the project root): ``Question`` records or rows with
      question/answer fields, shuffled with ``seed`` and split into held-out, validation and pool.

    Raises ``FileNotFoundError`` naming ``seeds.data_dir`` when the paper set's files are missing;
    for a seeds file, ``InputError`` naming the file and ``seeds.set`` when it is missing or holds
    too few questions for held-out, validation and a non-empty pool, and ``RecordFileError`` (an
    ``InputError``: file, line, field) for a malformed or oversized row.
    """
    s = params.seeds
    n_val = s.val_size
    if s.set == "arith":
        from selfevolve.questions import arith

        seed_forms, frontier = arith_forms(params)
        beyond = reach_forms(params)
        taken: set[str] = set()

        def draw(n: int, offset: int, forms: list[str], prefix: str, split: str | None) -> list[Question]:
            return _disjoint(arith.generate(n * 2, seed=params.seed + offset, forms=forms, prefix=prefix, split=split), taken)[:n]

        # validation first: a form with few distinct questions (1+1 has 100) must still be seen by
        # the checkpoint guard (drawn after 200 held-out questions, validation held 6-7 of them)
        val = draw(n_val, 10_001, seed_forms, "val-seed", "seed") + draw(n_val, 40_004, frontier, "val-frontier", "frontier")
        held = (draw(s.heldout_size, 20_002, seed_forms, "heldout-seed", "seed")
                + draw(s.heldout_size, 30_003, frontier, "heldout-frontier", "frontier"))
        pool = draw(s.size, 0, seed_forms, "seed", None)
        if beyond:  # drawn last: the seed and frontier questions stay those of a ladder without rungs beyond
            val += draw(n_val, 60_006, beyond, "val-beyond", "beyond")
            held += draw(s.heldout_size, 50_005, beyond, "heldout-beyond", "beyond")
        return pool, val, held
    if s.set.endswith((".jsonl", ".json")):
        import random

        from selfevolve.questions.benchmarks import load_benchmark

        path = Path(s.set) if Path(s.set).is_absolute() else Path(root) / s.set
        if not path.is_file():
            raise InputError(f"{path}: no such file (seeds.set in params.yaml names it); give the path of a JSON Lines "
                             "file of questions, relative to the project root, or one of arith, tiny-code, paper")
        items = load_benchmark(path)
        need = s.heldout_size + n_val + 1
        if len(items) < need:
            raise InputError(f"{path}: {len(items)} questions (seeds.set); the seed set needs at least {need}: "
                             f"seeds.heldout_size ({s.heldout_size}) + seeds.val_size ({n_val}) + 1 for the pool. "
                             "Add questions to the file (one JSON object per line) or lower those sizes")
        random.Random(params.seed).shuffle(items)
        held, val = items[: s.heldout_size], items[s.heldout_size: s.heldout_size + n_val]
        return items[s.heldout_size + n_val: s.heldout_size + n_val + s.size], val, held
    if s.set == "tiny-code":
        from selfevolve.questions import tiny_code

        return tiny_code.split(s.size, n_val, s.heldout_size, seed=params.seed)
    from selfevolve.questions import paper

    data_dir = Path(s.data_dir)
    if not data_dir.is_absolute():
        data_dir = Path(root) / data_dir
    return paper.load(data_dir, size=s.size, n_val=n_val, n_heldout=s.heldout_size, seed=params.seed)


def arith_forms(params: Params) -> tuple[list[str], list[str]]:
    """(seed forms, frontier forms) of the arith ladder for ``params.seeds.arith``."""
    from selfevolve.questions import arith

    a = params.seeds.arith
    seed = [f for op in a.ops for f in arith.seed_forms(a.seed_digits, a.foothold_digits, a.foothold_short, op)]
    frontier = [f for op in a.ops for lv in a.frontier_levels for f in arith.frontier_forms(lv, a.foothold_short + 1, op)]
    return seed, frontier


def reach_forms(params: Params) -> list[str]:
    """The held-out rungs beyond the frontier (``seeds.arith.reach_levels``): two-operand forms of
    those levels whose shorter operand has more digits than the footholds, e.g. ``5+3 .. 6+6``."""
    from selfevolve.questions import arith

    a = params.seeds.arith
    return [f for op in a.ops for lv in a.reach_levels for f in arith.frontier_forms(lv, a.foothold_short + 1, op)]
