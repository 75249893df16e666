"""Loading named benchmarks and JSONL/JSON files as Question records."""

from __future__ import annotations

import gzip
import json

import pytest

from selfevolve.questions.benchmarks import (
    BenchmarkFormatError,
    BenchmarkNotFoundError,
    available_benchmarks,
    gsm8k_final_answer,
    last_boxed,
    load_benchmark,
    mbpp_split_of,
    parse_field_map,
)
from selfevolve.records import CodeSpec, MathSpec, Question, write_jsonl


def test_gsm8k(bench_dir):
    qs = load_benchmark("gsm8k", data_dir=bench_dir)
    assert len(qs) == 1319
    assert [q.id for q in qs[:3]] == ["0", "1", "2"] and qs[-1].id == "1318"
    assert qs[0].answer == "18" and qs[0].domain == "math" and qs[0].source == "benchmark:gsm8k"
    assert qs[146].answer == "2125"  # "#### 2,125": thousands separator removed
    assert qs[0].meta["solution"].endswith("#### 18")
    assert all(isinstance(q.spec, MathSpec) and "," not in q.answer for q in qs)
    assert len(load_benchmark("gsm8k", data_dir=bench_dir, split="train", limit=5)) == 5
    train = load_benchmark("gsm8k-train", data_dir=bench_dir)
    assert len(train) == 7473 and train[0].answer == "72" and train[0].source == "benchmark:gsm8k-train"


def test_math500_and_math_train(bench_dir):
    qs = load_benchmark("math500", data_dir=bench_dir)
    assert len(qs) == 500 and qs[0].id == "0"
    assert qs[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert qs[0].meta["subject"] == "Precalculus" and qs[0].level == 2 and qs[0].meta["categories"] == ["subject", "level"]
    train = load_benchmark("math-train", data_dir=bench_dir)
    # 7,500 rows; two solutions end in an empty \boxed{} (no gold answer) and are skipped
    assert len(train) == 7498
    assert train[0].id == "train/algebra/0.json" and train[0].answer == "0" and train[0].level == 5
    assert train[1].answer == "8+4i"
    assert len({q.id for q in train}) == len(train)


def test_olympiadbench(bench_dir):
    qs = load_benchmark("olympiadbench", data_dir=bench_dir)
    assert len(qs) == 675 and qs[0].id == "1606" and qs[0].answer == "2"
    multi = [q for q in qs if q.meta["is_multiple_answer"]]
    assert len(multi) == 94
    assert any(q.meta["unit"] for q in qs)
    assert {q.meta["answer_type"] for q in qs} == {"Numerical", "Expression", "Tuple", "Interval"}
    q = next(q for q in qs if q.meta["final_answer"] == ["$\\frac{1}{3},-2,5$"])
    assert q.answer == "\\frac{1}{3},-2,5"


def test_humaneval(bench_dir):
    qs = load_benchmark("humaneval", data_dir=bench_dir)
    assert len(qs) == 164 and qs[0].id == "HumanEval/0" and qs[0].domain == "code"
    spec = qs[0].spec
    assert isinstance(spec, CodeSpec) and spec.entry_point == "has_close_elements"
    assert spec.tests[0].lstrip().startswith("METADATA") or "def check(candidate)" in spec.tests[0]
    assert spec.tests[-1] == "check(has_close_elements)"
    assert spec.reference_solution.startswith(qs[0].text) and "return False" in spec.reference_solution


def test_mbpp_splits(bench_dir):
    sizes = {s: len(load_benchmark("mbpp", data_dir=bench_dir, split=s)) for s in ("test", "validation", "train", "prompt", "all")}
    assert sizes == {"test": 500, "validation": 90, "train": 374, "prompt": 10, "all": 974}
    qs = load_benchmark("mbpp", data_dir=bench_dir)
    assert qs[0].id == "11" and qs[-1].id == "510"
    q = qs[0]
    assert isinstance(q.spec, CodeSpec) and q.spec.entry_point == "remove_Occ"
    assert q.spec.tests and all(t.startswith("assert") for t in q.spec.tests)
    assert "remove_Occ" in q.spec.reference_solution and "assert" in q.text
    assert q.split == "test" and mbpp_split_of(600) == "validation" and mbpp_split_of(1) == "prompt"
    setup = [q for q in load_benchmark("mbpp", data_dir=bench_dir, split="all") if q.spec.setup]
    assert setup  # test_setup_code is carried over
    san = load_benchmark("mbpp-sanitized", data_dir=bench_dir, split="all")
    assert len(san) == 427 and san[0].id == "2"
    assert len(load_benchmark("mbpp-sanitized", data_dir=bench_dir)) == 257


def test_limit_and_errors(bench_dir, tmp_path):
    assert [q.id for q in load_benchmark("math500", data_dir=bench_dir, limit=3)] == ["0", "1", "2"]
    with pytest.raises(ValueError, match="neither a benchmark name"):
        load_benchmark("no-such-benchmark", data_dir=bench_dir)
    with pytest.raises(ValueError, match="no split 'dev'"):
        load_benchmark("mbpp", data_dir=bench_dir, split="dev")
    with pytest.raises(ValueError):
        load_benchmark("gsm8k", data_dir=bench_dir, limit=0)
    assert set(available_benchmarks()) >= {"gsm8k", "math500", "olympiadbench", "humaneval", "mbpp", "mbpp-sanitized"}


def test_missing_data_offline_names_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(BenchmarkNotFoundError) as exc:
        load_benchmark("gsm8k", data_dir=tmp_path)
    msg = str(exc.value)
    assert "gsm8k_test.jsonl" in msg and str(tmp_path) in msg and "--data-dir" in msg


def test_jsonl_file_with_field_map(tmp_path):
    p = tmp_path / "mine.jsonl"
    p.write_text(
        "\n".join(json.dumps(r) for r in [
            {"uid": "a", "problem": "1+1?", "sol": "so \\boxed{2}"},
            {"uid": "b", "problem": "2+2?", "sol": "4 apples.\n#### 4"},
            {"uid": "c", "problem": "pi?", "sol": "\\pi"},
        ]) + "\n"
    )
    qs = load_benchmark(str(p), field_map="question=problem,answer=sol,id=uid,domain=math")
    assert [(q.id, q.answer) for q in qs] == [("a", "2"), ("b", "4"), ("c", "\\pi")]
    assert qs[0].text == "1+1?" and qs[0].source == "file:mine.jsonl"
    # defaults: question/answer fields found by name, ids are row indices
    p2 = tmp_path / "plain.jsonl.gz"
    with gzip.open(p2, "wt") as fh:
        fh.write(json.dumps({"question": "q", "answer": 7}) + "\n")
    assert [(q.id, q.answer) for q in load_benchmark(p2)] == [("0", "7")]
    # code rows
    p3 = tmp_path / "code.json"
    p3.write_text(json.dumps([{"text": "add", "test_list": ["assert add(1, 2) == 3"], "code": "def add(a, b):\n    return a + b\n"}]))
    (cq,) = load_benchmark(p3, field_map={"domain": "code"})
    assert cq.domain == "code" and cq.spec.entry_point == "add" and cq.spec.tests == ["assert add(1, 2) == 3"]
    # a file of Question records loads as such
    p4 = tmp_path / "questions.jsonl"
    write_jsonl(p4, [Question(id="x", domain="math", text="t", spec=MathSpec(answer="3"))])
    assert load_benchmark(p4)[0].answer == "3"


def test_bad_rows_name_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"question": "q", "answer": "1"}\n\n{"question": "q2"\n')
    with pytest.raises(BenchmarkFormatError) as exc:
        load_benchmark(p)
    assert exc.value.line == 3 and "bad.jsonl:3" in str(exc.value)
    p.write_text('{"question": "q", "answer": "1"}\n{"answer": "2"}\n')
    with pytest.raises(BenchmarkFormatError, match=r"bad.jsonl:2 field 'question'"):
        load_benchmark(p)
    with pytest.raises(ValueError, match="unknown field map keys"):
        parse_field_map("question=a,bogus=b")
    with pytest.raises(ValueError, match="key=field"):
        parse_field_map("question")


def test_answer_helpers():
    assert gsm8k_final_answer("x\n#### 1,234") == "1234"
    assert gsm8k_final_answer("no marker") is None
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("nothing") is None


@pytest.mark.slow
def test_reference_solutions_pass_in_the_sandbox(bench_dir):
    """MBPP validation ids: the dataset's own solutions pass their tests through the sandbox."""
    from selfevolve.evaluation.metrics import grade_predictions

    qs = load_benchmark("mbpp", data_dir=bench_dir, split="validation")
    metrics, failures = grade_predictions(qs, [{"id": q.id, "completion": q.spec.reference_solution} for q in qs], code_timeout_s=20.0)
    assert metrics["n"] == 90 and metrics["accuracy"] >= 0.98, failures[:3]
