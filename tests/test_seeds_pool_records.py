"""Seed sets, the question pool's de-duplication and statistics, and JSONL record files."""

import json
from pathlib import Path

import random

import pytest

from selfevolve.config import Params
from selfevolve.pool import (NEXT_RUNG_SOURCE, dedup_against, edge_groups, frontier_weights, next_rung_forms,
                             next_rung_questions, pool_stats, reference_items, where_designs_differ)
from selfevolve.records import MathSpec, PassRate, Question, RecordFileError, read_jsonl, write_jsonl
from selfevolve.questions import arith, tiny_code


def test_arith_answers_exact_and_deterministic():
    a = arith.generate(300, seed=1)
    assert [q.model_dump() for q in a] == [q.model_dump() for q in arith.generate(300, seed=1)]
    for q in a:
        nums, ops = arith.parse_expression(q.text)
        assert str(arith.evaluate(nums, ops)) == q.spec.answer
        worked = q.meta["worked"]
        assert worked.endswith(f"={q.spec.answer}")
    assert {q.level for q in a} == {1, 2, 3, 4, 5}


def test_a_sums_worked_steps_align_its_operands_first():
    """The scratchpad's first line pads both operands to one width, so every column step reads one
    digit of each number (a 4+3 sum's columns look like a 4+2 sum's); the width is one column more
    than the longer operand for every sum whose value is odd, and the steps cover every column."""
    assert arith.scratchpad([7311, 877], ["+"]) == (
        "7311+0877 1+7+0=8 1+7+0=8 3+8+0=11 7+0+1=8 r=8818 =8188")
    assert arith.scratchpad([7311, 876], ["+"]) == (
        "07311+00876 1+6+0=7 1+7+0=8 3+8+0=11 7+0+1=8 0+0+0=0 r=78180 =8187")
    assert arith.scratchpad([27, 682], ["+"]).startswith("0027+0682 7+2+0=9 ")
    assert arith.scratchpad([5, 3, 12], ["+", "+"]) == "5+3 5+3+0=8 r=8 =8 08+12 8+2+0=10 0+1+1=2 r=02 =20"
    wider = 0
    for q in arith.generate(400, seed=3):
        line, *steps = q.meta["worked"].split(" ")
        a, b = line.split("+")
        assert len(a) == len(b) and int(a) + int(b) == int(q.spec.answer)
        assert len([s for s in steps if s.count("+") == 2]) == len(a)
        wider += len(a) > max(len(str(n)) for n in q.meta["nums"])
    assert 0.4 < wider / 400 < 0.6


def test_restated_sums_copy_their_operands_as_written_before_the_aligned_line():
    """With ``restate`` every sum's steps start with its operands as written, then the same aligned
    line and column steps as without (for a running total too); without it nothing changes."""
    assert arith.scratchpad([1857, 374], ["+"], restate=True) == (
        "1857+374 01857+00374 7+4+0=11 5+7+1=13 8+3+1=12 1+0+1=2 0+0+0=0 r=13220 =2231")
    assert arith.scratchpad([5, 3, 12], ["+", "+"], restate=True) == (
        "5+3 5+3 5+3+0=8 r=8 =8 8+12 08+12 8+2+0=10 0+1+1=2 r=02 =20")
    rng_a, rng_b = random.Random(4), random.Random(4)
    for form in ("4+3", "1+2", "5+2"):
        plain, restated = arith.make_question(rng_a, form, "p"), arith.make_question(rng_b, form, "r", restate=True)
        a, b = plain.meta["nums"]
        assert restated.meta["worked"] == f"{a}+{b} " + plain.meta["worked"]


@pytest.mark.parametrize("text, value", [("Compute 3 + 4.", 7), ("What is 7 - 12?", -5), ("compute 12 * 3", 36),
                                         ("Compute 10 - 3 - 2.", 5), ("Compute 2 + 3 * 4.", 14), ("Compute 2 * 3 * 4", 24)])
def test_parse_expression(text, value):
    nums, ops = arith.parse_expression(text)
    assert arith.evaluate(nums, ops) == value


@pytest.mark.parametrize("text", ["Compute 3 + .", "hello", "", "Compute 3 ** 4", "Compute 1 + 2 + 3 + 4 + 5.", None, "9" * 600,
                                  "Compute " + "9" * 41 + " + 1."])
def test_parse_expression_rejects(text):
    assert arith.parse_expression(text) is None


def test_arith_ladder_forms_levels_and_frontier():
    assert arith.parse_form("4+3") == ("+", (4, 3)) and arith.level((4, 3)) == 4 and arith.level((3, 3, 2)) == 4
    for bad in ("4+", "4+3-2", "0+1", "1*2", "1+1+1+1+1", "41+1"):
        with pytest.raises(ValueError):
            arith.parse_form(bad)
    seed = arith.seed_forms(3, (4, 5), 2)
    assert len(seed) == 9 + 8 and "4+2" in seed and "2+5" in seed and "4+3" not in seed
    frontier = arith.frontier_forms(4, 3)
    assert frontier == ["4+3", "3+4", "4+4"] and not set(frontier) & set(seed)
    for q in arith.generate(60, seed=2, forms=frontier, split="frontier"):
        nums, ops = arith.parse_expression(q.text)
        assert arith.form_of(nums, ops) == q.form in frontier and q.level == 4
        assert q.split == "frontier" and q.categories()["split"] == "frontier"
        assert q.meta["worked"].endswith(f"={q.spec.answer}") and str(sum(nums)) == q.spec.answer


def test_harder_form_climbs_one_step():
    import random

    rng = random.Random(0)
    for form in ("3+3", "4+2", "1+1", "2+2+1"):
        op, digits = arith.parse_form(form)
        for _ in range(30):
            new = arith.parse_form(arith.harder_form(form, rng))[1]
            grown = len(new) > len(digits) or sum(new) == sum(digits) + 1
            assert grown and arith.level(new) in (arith.level(digits), arith.level(digits) + 1)


def test_tiny_code_reference_solutions_pass_their_tests():
    for q in tiny_code.generate(60, seed=3):
        env: dict = {}
        exec(q.spec.reference_solution, env)  # trusted: our own generated reference code
        for t in q.spec.tests:
            exec(t, env)
    pool, val, held = tiny_code.split(20, 5, 5, seed=0)
    texts = [(q.text, tuple(q.spec.tests)) for q in pool + val + held]
    assert len(set(texts)) == 30


def test_arith_seed_splits_are_disjoint(tmp_path):
    from selfevolve.questions.seed_sets import load_seed_set

    p = Params()
    pool, val, held = load_seed_set(p, tmp_path)
    assert not ({q.text for q in pool} & {q.text for q in held}) and not ({q.text for q in val} & {q.text for q in held})
    assert not {q.text for q in pool} & {q.text for q in val}
    assert len(held) == 3 * p.seeds.heldout_size and len(val) == 3 * p.seeds.val_size
    from collections import Counter

    n = p.seeds.heldout_size
    assert Counter(q.split for q in held) == {"seed": n, "frontier": n, "beyond": n}
    frontier = {q.form for q in held if q.split == "frontier"}
    assert frontier == {"4+3", "3+4", "4+4"} and not frontier & {q.form for q in pool}
    beyond = {q.form for q in held if q.split == "beyond"}
    assert beyond == {f"{x}+{y}" for lv in (5, 6, 7, 8) for x in range(3, lv + 1) for y in range(3, lv + 1) if max(x, y) == lv}
    assert {"5+3", "3+5", "6+6", "7+3", "8+8"} <= beyond and len(beyond) == 5 + 7 + 9 + 11
    assert not beyond & {q.form for q in pool}
    # the rungs beyond are drawn last: the seed and frontier questions are those of a ladder without them
    p.seeds.arith.reach_levels = []
    _, val0, held0 = load_seed_set(p, tmp_path)
    assert [q.text for q in held0] == [q.text for q in held if q.split != "beyond"]
    assert [q.text for q in val0] == [q.text for q in val if q.split != "beyond"]


def test_arith_validation_sees_every_seed_form_even_a_small_one(tmp_path):
    """1+1 has 100 distinct sums; drawn after 200 held-out questions per split, the smollm2-arith
    validation held 6-7 of them, too few for the per-form retention guard. Validation is drawn
    first."""
    from collections import Counter

    from selfevolve.config import load_params
    from selfevolve.questions.seed_sets import load_seed_set

    root = Path(__file__).resolve().parents[1]
    for seed in (0, 1):
        p = load_params(root / "params.yaml", overlays=[root / "configs" / "smollm2-arith.yaml"], overrides={"seed": seed})
        _, val, held = load_seed_set(p, tmp_path)
        forms = Counter(q.form for q in val if q.split == "seed")
        assert set(forms) == {"1+1", "1+2", "2+1"} and min(forms.values()) >= 12, forms
        assert Counter(q.form for q in held)["1+1"] >= 30

def test_reach_is_the_longest_sum_answered_often_enough():
    from selfevolve.questions.arith import reach, rung_size

    assert rung_size("4+3") == 7 and rung_size("5+5") == 10
    acc = {"3+3": 1.0, "5+2": 0.99, "4+3": 0.6, "3+4": 0.4, "4+4": 0.2, "bogus": 1.0}
    assert reach(acc, 0.5) == 7 and reach(acc, 0.9) == 7 and reach(acc, 0.1) == 8 and reach({}, 0.5) == 0
    assert reach({"2+2": 0.95, "3+3": 0.5}, 0.9) == 4


def test_paper_seed_set(bench_dir):
    from selfevolve.questions import paper

    pool, val, held = paper.load(bench_dir, size=40, n_val=10, n_heldout=10)
    assert len(pool) == 40 and len(val) == 10 and len(held) == 10
    assert {q.domain for q in pool} == {"math", "code"}
    assert any(q.source.endswith("humaneval") for q in pool) and any(q.source.endswith("mbpp") for q in pool)


def test_dedup_and_stats():
    pool = [Question(id="a", domain="math", text="Compute 12 + 34.", spec=MathSpec(answer="46"), level=3)]
    new = [Question(id="b", domain="math", text="compute 12 + 34.", spec=MathSpec(answer="46"), source="challenger"),
           Question(id="c", domain="math", text="Compute 12 + 35.", spec=MathSpec(answer="47"), source="challenger"),
           Question(id="d", domain="math", text="Compute 12 + 35.", spec=MathSpec(answer="47"), source="challenger")]
    kept, dups = dedup_against(pool, new, n=3, threshold=0.9)
    assert [q.id for q in kept] == ["c"] and [q.id for q in dups] == ["b", "d"]
    kept2, _ = dedup_against(pool, new[2:3], n=3, threshold=0.2)  # 1 of 5 trigrams shared
    assert kept2 == []
    s = pool_stats(pool + kept)
    assert s["size"] == 2 and s["challenger_questions"] == 1


def _measured(form: str, n: int, rate: float, prefix: str, samples: int = 4) -> list[Question]:
    qs = arith.generate(n, seed=len(prefix), forms=[form], prefix=prefix)
    for q in qs:
        q.measured = PassRate(pass_rate=rate, samples=samples, cycle="c1")
    return qs


def test_the_challengers_edge_is_its_frontier_and_the_hardest_rung_it_solves():
    """``edge_groups``: the forms whose pass rate is in the band (4+3), and the forms of the hardest
    rung solved at least at the band's low end (rung 7: 5+2 mastered, 4+3); not a mastered easier
    form (3+3), not an unsolved harder one (4+4 at 0), not a form with too few attempts (5+3 on one
    lucky question), and a question without a form by its own rate. ``reference_items`` draws
    ``edge_share`` of the items from there, a form uniformly (not by its number of questions), and
    at ``edge_share`` 0 or with nothing measured draws exactly as ``frontier_weights`` did."""
    pool = (_measured("3+3", 200, 1.0, "a") + _measured("5+2", 100, 1.0, "b") + _measured("4+3", 10, 0.3, "c")
            + _measured("4+4", 10, 0.0, "d") + _measured("5+3", 1, 0.5, "e") + arith.generate(50, seed=9, prefix="u"))
    code = Question(id="k1", domain="math", text="What is the smallest prime above 20?", spec=MathSpec(answer="23"),
                    measured=PassRate(pass_rate=0.5, samples=4, cycle="c1"))
    groups = edge_groups(pool + [code], (0.05, 0.8))
    assert sorted(g[0].form or g[0].id for g in groups) == ["4+3", "5+2", "k1"]
    assert [len(g) for g in groups if g[0].form == "4+3"] == [10]
    assert sorted(g[0].form for g in edge_groups(pool, (0.05, 0.8), min_samples=4)) == ["4+3", "5+3"]  # rung 8 now

    band, boost = (0.05, 0.8), 8.0
    refs = reference_items(random.Random(3), pool, 4000, band, boost, edge_share=0.5)
    forms = [q.form for q in refs]
    # half by form (a quarter each), half by frontier_weights (4+3: 80 of 441, 5+2: 100 of 441)
    assert 0.31 < forms.count("4+3") / 4000 < 0.37 and 0.33 < forms.count("5+2") / 4000 < 0.4
    assert forms.count("4+4") < 70 and 800 < forms.count("3+3") < 1020  # by the weights only: 45 and 907 expected
    for share in (0.0, 0.5):
        unmeasured = arith.generate(40, seed=4, prefix="v")
        assert reference_items(random.Random(5), unmeasured, 30, band, boost, share) == \
            random.Random(5).choices(unmeasured, weights=frontier_weights(unmeasured, band, boost), k=30)
    assert reference_items(random.Random(5), pool, 30, band, boost, 0.0) == \
        random.Random(5).choices(pool, weights=frontier_weights(pool, band, boost), k=30)


def test_questions_one_rung_past_the_edge_are_fresh_questions_of_the_longer_forms():
    """``next_rung_forms``: a digit more on one operand of each form of the hardest rung solved at all
    (rung 7 here: 5+2 and 4+3 -> 6+2, 5+3, 4+4), not of easier forms (3+3), nothing when nothing is
    measured; ``longer_forms`` grows a product's first operand only. ``next_rung_questions`` draws
    new questions of those forms with exact answers and their own source, never a pool question."""
    assert arith.longer_forms("4+4") == ["5+4", "4+5"] and arith.longer_forms("3*1") == ["4*1"]
    assert arith.longer_forms("2+2+1") == ["3+2+1", "2+3+1", "2+2+2"]
    assert arith.no_easier("6+4", "6+3") and arith.no_easier("6+3", "6+3") and not arith.no_easier("5+4", "6+3")
    assert not arith.no_easier("6+3+1", "6+3") and not arith.no_easier("6*1", "6+1") and not arith.no_easier("not-a-form", "6+3")
    pool = _measured("3+3", 200, 1.0, "a") + _measured("5+2", 100, 1.0, "b") + _measured("4+3", 10, 0.3, "c")
    band = (0.05, 0.8)
    assert next_rung_forms(pool, band) == ["4+4", "5+3", "6+2"]
    assert next_rung_forms(arith.generate(20, seed=1), band) == [] == next_rung_questions(random.Random(0), [], band, 5, "x")
    fresh = next_rung_questions(random.Random(3), pool, band, 300, "c2-next")
    assert len(fresh) == 300 and {q.form for q in fresh} == {"4+4", "5+3", "6+2"} and fresh[0].id == "c2-next0000"
    assert all(q.spec.answer == str(sum(q.meta["nums"])) and q.source == NEXT_RUNG_SOURCE and q.measured is None for q in fresh)
    assert not {q.id for q in fresh} & {q.id for q in pool} and next_rung_questions(random.Random(3), pool, band, 0, "x") == []
    assert next_rung_questions(random.Random(3), pool, band, 300, "c2-next") == fresh


def test_a_longer_form_measured_at_zero_leaves_the_next_rung_while_another_is_not():
    """A longer form with no right answer in 16 attempts or more (6+2 here) is not drawn again while
    another longer form is not measured at zero; one measured on fewer attempts stays; when
    every longer form is at zero, all of them are drawn."""
    band = (0.05, 0.8)
    edge = _measured("5+2", 100, 1.0, "b") + _measured("4+3", 10, 0.3, "c")
    assert next_rung_forms(edge + _measured("6+2", 5, 0.0, "d"), band) == ["4+4", "5+3"]
    assert next_rung_forms(edge + [_measured("6+2", 5, 0.0, "d")[0]], band) == ["4+4", "5+3", "6+2"]  # 4 attempts < 16
    at_zero = edge + _measured("6+2", 5, 0.0, "d") + _measured("5+3", 5, 0.0, "e") + _measured("4+4", 5, 0.0, "f")
    assert next_rung_forms(at_zero, band) == ["4+4", "5+3", "6+2"]
    drawn = next_rung_questions(random.Random(3), edge + _measured("6+2", 5, 0.0, "d"), band, 200, "c3-next")
    assert {q.form for q in drawn} == {"4+4", "5+3"}
    # a form no easier than one at zero (every operand at least as long) is left out before it is measured
    assert next_rung_forms(edge + _measured("6+1", 5, 0.0, "g"), band) == ["4+4", "5+3"]
    assert next_rung_forms(edge + _measured("5+1", 5, 0.0, "g"), band) == ["4+4"]
    assert next_rung_forms(edge + _measured("2+1+1", 5, 0.0, "g") + _measured("3-1", 5, 0.0, "h"), band) == ["4+4", "5+3", "6+2"]
    other = _measured("3+1", 5, 0.0, "k")
    for q in other:
        q.form = "not-a-form"  # a form of another seed set
    assert next_rung_forms(edge + other, band) == ["4+4", "5+3", "6+2"]


def test_next_rung_questions_join_the_solve_set_and_then_the_pool_with_their_pass_rates(tmp_path):
    """Through the stages: ``plan`` adds ``sage.next_rung_questions`` environment questions of the next
    rung to the solve set (after the gated and the re-solved ones), and ``rewards`` puts them into
    the pool with the Solver's pass rates, no Critic gate, so the next cycle's edge can stand on them;
    with the knob at 0 the solve set is what it was."""
    from selfevolve.config import Params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import Attempt, Verdict, read_jsonl, write_jsonl
    from selfevolve.stages.registry import get
    from selfevolve.stages.runner import execute

    base, c1 = cycle_paths("base", tmp_path), cycle_paths("c1", tmp_path)
    write_jsonl(base.pool, _measured("3+3", 20, 1.0, "a") + _measured("4+3", 10, 0.3, "c"))
    for f in (c1.challenge, c1.critic_questions, c1.plans, c1.critic_plans):
        write_jsonl(f, [])
    sizes = {}
    for n in (0, 6):
        params = Params.model_validate({"sage": {"pool_sample": 4, "next_rung_questions": n, "ablation": {"planner": False}}})
        m = execute(get("plan"), params, "c1", tmp_path, track=False)
        sizes[n] = (m["solve_set_size"], m["solve_set_next_rung_questions"])
    assert sizes == {0: (4, 0), 6: (10, 6)}
    solve_set = read_jsonl(c1.solve_set, Question)
    beyond = [q for q in solve_set if q.source == NEXT_RUNG_SOURCE]
    assert [q.id for q in beyond] == [f"c1-next{i:04d}" for i in range(6)] and {q.form for q in beyond} <= {"5+3", "4+4"}
    attempts = [Attempt(id=f"{q.id}-s{k}", question_id=q.id, sample=k, completion="") for q in solve_set for k in range(2)]
    write_jsonl(c1.attempts, attempts)
    write_jsonl(c1.verdicts, [Verdict(attempt_id=a.id, question_id=a.question_id, correct=float(a.sample == 0), status="ok")
                              for a in attempts])
    m = execute(get("rewards"), params, "c1", tmp_path, track=False)
    pool = {q.id: q for q in read_jsonl(c1.pool, Question)}
    assert m["pool_growth_next_rung"] == 6 == m["pool_growth"] and len(pool) == 36
    assert all(pool[q.id].measured.pass_rate == 0.5 and pool[q.id].measured.samples == 2 for q in beyond)


def test_workflow_designs_are_measured_where_they_differ():
    """``where_designs_differ`` (the MASS search's questions): half on the Solver's frontier, half
    beyond it (measured, never solved), each a uniform draw; the rest filled from the others when
    one kind runs out; seeded; all questions when more are asked."""
    band = (0.05, 0.8)
    frontier = _measured("4+3", 10, 0.5, "f")
    beyond = _measured("5+5", 50, 0.0, "z")
    others = _measured("3+3", 50, 1.0, "m") + beyond + arith.generate(20, seed=2, prefix="u")
    pool = others[:30] + frontier + others[30:]
    f_ids, z_ids = {q.id for q in frontier}, {q.id for q in beyond}
    picked = where_designs_differ(random.Random(1), pool, band, 16)
    assert len({q.id for q in picked}) == 16 and {q.id for q in picked[:8]} <= f_ids and {q.id for q in picked[8:]} <= z_ids
    assert picked == where_designs_differ(random.Random(1), pool, band, 16)
    wide = where_designs_differ(random.Random(1), pool, band, 40)  # 10 on the frontier, then 30 beyond it
    assert {q.id for q in wide[:10]} == f_ids and {q.id for q in wide[10:]} <= z_ids
    assert sorted(q.id for q in where_designs_differ(random.Random(0), pool, band, 500)) == sorted(q.id for q in pool)
    assert len(where_designs_differ(random.Random(0), others[:50], band, 8)) == 8  # none on or beyond the frontier: uniform


def test_jsonl_roundtrip_and_errors(tmp_path):
    qs = arith.generate(5, seed=0)
    path = tmp_path / "q.jsonl"
    assert write_jsonl(path, qs) == 5
    assert read_jsonl(path, Question) == qs
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == 5 and ds[0]["spec"]["answer"] == qs[0].spec.answer
    lines = path.read_text().splitlines()
    bad = json.loads(lines[2])
    del bad["text"]
    lines[2] = json.dumps(bad)
    lines[3] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordFileError) as exc:
        read_jsonl(path, Question)
    assert exc.value.line == 3 and exc.value.field == "text" and ":3 field 'text'" in str(exc.value)


def test_paper_ids_are_unique(bench_dir):
    from selfevolve.questions import paper

    pool, val, held = paper.load(bench_dir, size=400, n_val=100, n_heldout=200)
    ids = [q.id for q in pool + val + held]
    assert len(ids) == len(set(ids))


def test_seed_file_set_and_malformed_seed_file(tmp_path):
    from selfevolve.records import RecordFileError
    from selfevolve.questions.seed_sets import load_seed_set

    qs = arith.generate(30, seed=5)
    write_jsonl(tmp_path / "mine.jsonl", qs)
    p = Params()
    p.seeds.set, p.seeds.size, p.seeds.heldout_size, p.seeds.val_size = "mine.jsonl", 20, 6, 3
    pool, val, held = load_seed_set(p, tmp_path)
    assert (len(pool), len(val), len(held)) == (20, 3, 6)
    assert {q.id for q in pool + val + held} <= {q.id for q in qs}
    lines = (tmp_path / "mine.jsonl").read_text().splitlines()
    lines[4] = lines[4].replace('"domain": "math"', '"domain": "poetry"')
    (tmp_path / "mine.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordFileError) as exc:
        load_seed_set(p, tmp_path)
    assert exc.value.line == 5 and "domain" in str(exc.value)


def test_question_fields_stages_decide_on_are_typed_and_old_records_still_read(tmp_path):
    """form, split, reference, answer_agrees and the measured pass rate are fields; a record
    written when they lived in ``meta`` reads into them (and out of ``meta``)."""
    old = {"id": "q1", "domain": "math", "text": "Compute 12 + 30.", "spec": {"kind": "math", "answer": "42"},
           "meta": {"form": "2+2", "split": "frontier", "reference": "environment", "answer_agrees": True,
                    "pass_rate": 0.25, "samples": 4, "measured_in": "c1", "expression": "12 + 30", "categories": ["form", "split"]}}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (q,) = read_jsonl(path, Question)
    assert (q.form, q.split, q.reference, q.answer_agrees) == ("2+2", "frontier", "environment", True)
    assert q.measured is not None and (q.measured.pass_rate, q.measured.samples, q.measured.cycle) == (0.25, 4, "c1")
    assert q.meta == {"expression": "12 + 30", "categories": ["form", "split"]}
    assert q.categories() == {"form": "2+2", "split": "frontier"}
    write_jsonl(path, [q])
    assert read_jsonl(path, Question) == [q] and "pass_rate" not in json.loads(path.read_text())["meta"]
    new = arith.generate(3, seed=1, forms=["3+2"], split="frontier")
    assert all(x.form == "3+2" and x.split == "frontier" and "form" not in x.meta for x in new)
    with pytest.raises(ValueError):
        Question(id="q", domain="math", text="t", spec=MathSpec(answer="1"), reference="the model")
