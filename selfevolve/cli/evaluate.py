"""``selfevolve evaluate`` (the campaign's ``evaluate`` stage, or ad-hoc evaluation of any model on
named benchmarks) and ``selfevolve report`` (plots and a markdown report of a campaign)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

import typer

from selfevolve.cli.common import fail, setup_logging

log = logging.getLogger("selfevolve")


def _ad_hoc_params(params_path: Optional[Path], overlays: list[Path] | None, model: str, backend: Optional[str],
                   updates: dict):
    """Params for an ad-hoc run: ``--params`` (+ overlays); without ``--params``, ``params.yaml``
    when it exists, else the defaults (+ overlays). The command's model/evaluation options (dotted
    ``updates``; None = not given) are applied on top and the result validated (exit 2 with the bad
    key on error)."""
    from selfevolve.config import ParamsError, load_params

    if params_path is None and Path("params.yaml").is_file():
        params_path = Path("params.yaml")
    given = {"model.base": model, "model.backend": backend, **updates}
    try:
        return load_params(params_path, overlays=[str(o) for o in overlays or []],
                           overrides={k: v for k, v in given.items() if v is not None})
    except ParamsError as exc:
        fail(str(exc))


def evaluate(
    cycle: Optional[str] = typer.Option(None, "--cycle", "-c", help="Stage mode: evaluate models/<CYCLE> ('base' = the base model) "
                                        "on params.yaml 'evaluation.benchmarks'; writes data/cycles/<CYCLE>/eval/ and "
                                        "metrics/<CYCLE>/evaluate.json."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Ad-hoc mode: model directory (save_pretrained output) or hub id; "
                                        "with --backend openai, the model name the server expects."),
    benchmark: Optional[list[str]] = typer.Option(None, "--benchmark", "-b", help="Ad-hoc: benchmark to run (repeatable): heldout, "
                                                  "gsm8k, math500, olympiadbench, humaneval, mbpp, mbpp-sanitized, or a JSONL/JSON "
                                                  "questions file. Default: params 'evaluation.benchmarks'."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="Ad-hoc: first N questions of each benchmark."),
    k: int = typer.Option(1, "--k", min=1, help="Ad-hoc: 1 = greedy pass@1; K > 1 = K samples per question at "
                          "sampling.temperature, unbiased pass@K."),
    backend: Optional[str] = typer.Option(None, "--backend", help="Ad-hoc: hf | vllm | openai (default: params model.backend)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Ad-hoc: folder with the local benchmark files "
                                            "(default: $SELFEVOLVE_DATA_DIR, then ../shared/benchmarks)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Ad-hoc: folder for the <benchmark>.jsonl per-item results "
                                       "and metrics.json (default: evaluations/<model name>)."),
    heldout: Optional[Path] = typer.Option(None, "--heldout", help="Ad-hoc: the file the 'heldout' benchmark reads "
                                           "(default: <root>/data/cycles/base/heldout.jsonl)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1, help="Ad-hoc: new tokens per answer "
                                                 "(default: evaluation.max_new_tokens)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0, help="Ad-hoc: sampling temperature for --k > 1 "
                                                "(default: sampling.temperature)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, help="Ad-hoc: rows (prompts x samples) per generation "
                                             "call (default: evaluation.batch_size)."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", min=64, help="Ad-hoc: context limit in tokens "
                                                "(default: model.max_model_len)."),
    openai_base_url: Optional[str] = typer.Option(None, "--openai-base-url", help="Ad-hoc with --backend openai: e.g. "
                                                  "http://127.0.0.1:8000/v1 (`selfevolve serve`)."),
    seed: int = typer.Option(0, "--seed", help="Ad-hoc: sampling seed."),
    params: Optional[Path] = typer.Option(None, "--params", "-p", help="params file (validated; default params.yaml). Ad-hoc mode takes its "
                                          "model/sampling/evaluation/verifiers settings from it, or the defaults when "
                                          "params.yaml does not exist."),
    overlay: Optional[list[Path]] = typer.Option(None, "--params-overlay", help="preset params files merged over --params"),
    root: Path = typer.Option(Path("."), "--root", help="project root holding data/, models/, mlflow/"),
    no_track: bool = typer.Option(False, "--no-track", help="stage mode: do not log to MLflow"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Evaluate a model on benchmarks: greedy pass@1, or sampled pass@k (unbiased estimator, Chen et al. 2021), graded by the verifiers (math-verify, code sandbox).

    Stage mode (what dvc.yaml runs): selfevolve evaluate --cycle c1

    Ad-hoc mode (prints the metrics as JSON on stdout, logs on stderr):
    selfevolve evaluate --model models/c1 --benchmark gsm8k --benchmark humaneval --limit 100 --k 5 --data-dir ../shared/benchmarks

    Metrics are <benchmark>_<metric>: n, samples, accuracy, pass_at_1, pass_at_K, answered_rate, truncated_rate, mean_output_tokens, accuracy_level_<L>, accuracy_<category>_<value>. Exit code 2 on bad options or missing data.
    """
    ad_hoc = {"--model": model, "--benchmark": benchmark, "--limit": limit, "--backend": backend, "--data-dir": data_dir, "--out": out,
              "--heldout": heldout, "--max-new-tokens": max_new_tokens, "--temperature": temperature, "--batch-size": batch_size,
              "--max-model-len": max_model_len, "--openai-base-url": openai_base_url}
    if cycle is not None:
        given = [name for name, value in ad_hoc.items() if value] + (["--k"] if k != 1 else [])
        if given:
            fail(f"--cycle runs the evaluate stage with params.yaml's evaluation settings; {', '.join(given)} belong to ad-hoc mode (--model)")
        from selfevolve.cli.stages import run_stage_or_fail
        from selfevolve.stages.registry import get

        setup_logging(verbose)
        run_stage_or_fail(get("evaluate_base" if cycle == "base" else "evaluate"), cycle, params or Path("params.yaml"), overlay,
                          root, track=not no_track, verbose=verbose)
        return
    if model is None:
        fail("give --cycle C (the campaign's evaluate stage) or --model PATH [--benchmark NAME ...] (ad-hoc evaluation)")
    if backend is not None and backend not in ("hf", "vllm", "openai"):
        fail(f"--backend must be hf, vllm or openai, got {backend!r}")
    setup_logging(verbose, stderr=True)
    _run_ad_hoc(model, benchmark, limit, k, backend, data_dir, out, heldout, max_new_tokens, temperature, batch_size,
                max_model_len, openai_base_url, seed, params, overlay, root)


def _run_ad_hoc(model, benchmark, limit, k, backend, data_dir, out, heldout, max_new_tokens, temperature, batch_size,
                max_model_len, openai_base_url, seed, params_path, overlay, root) -> None:
    from selfevolve.backends import make_backend
    from selfevolve.config import BenchmarkSpec
    from selfevolve.questions.benchmarks import BenchmarkNotFoundError
    from selfevolve.evaluation.evaluate import evaluate_benchmarks
    from selfevolve.evaluation.metrics import metric_name
    from selfevolve.evaluation.solve import SolveConfig
    from selfevolve.paths import cycle_paths
    from selfevolve.records import Question, RecordFileError, read_jsonl, write_json, write_jsonl

    params = _ad_hoc_params(params_path, overlay, model, backend, {
        "evaluation.max_new_tokens": max_new_tokens, "evaluation.batch_size": batch_size,
        "sampling.temperature": temperature, "model.max_model_len": max_model_len, "model.openai_base_url": openai_base_url,
    })
    if benchmark:
        specs = [BenchmarkSpec(name=b, limit=limit, k=k) for b in benchmark]
    else:
        specs = [BenchmarkSpec(name=s.name, limit=limit or s.limit, k=k if k != 1 else s.k) for s in params.evaluation.benchmarks]
    out = out or Path("evaluations") / metric_name(Path(model.rstrip("/")).name or model)
    heldout = heldout or cycle_paths("base", root).heldout
    overrides = {"batch_size": params.evaluation.batch_size} if params.model.backend == "hf" else {}
    try:
        held = read_jsonl(heldout, Question) if any(s.name == "heldout" for s in specs) else None
    except FileNotFoundError:
        fail(f"held-out file not found: {heldout} (run the 'seeds' stage first, or give --heldout)")
    except RecordFileError as exc:
        fail(str(exc))
    try:
        with make_backend(params.model, model_path=model, **overrides) as be:
            results, metrics = evaluate_benchmarks(be, specs, SolveConfig.from_params(params), heldout=held, data_dir=data_dir, seed=seed)
    except (BenchmarkNotFoundError, RecordFileError, FileNotFoundError, ValueError, ImportError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot load model {model!r}: {exc}")
    for key, rows in results.items():
        write_jsonl(Path(out) / f"{key}.jsonl", rows)
    write_json(Path(out) / "metrics.json", metrics)
    log.info("per-item results and metrics.json in %s", out)
    typer.echo(json.dumps(metrics, indent=2, sort_keys=True))


def report(
    root: Path = typer.Option(Path("."), "--root", help="project root of the campaign (params.yaml, metrics/, data/cycles/)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="output folder (default: <root>/reports)"),
    params: Optional[Path] = typer.Option(None, "--params", "-p", help="params file naming the cycles (default: <root>/params.yaml)"),
    no_track: bool = typer.Option(False, "--no-track", help="do not log the report to MLflow"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Round-over-round report of a campaign: PNG plots (benchmark scores, question pool size and difficulty, critic pass rates, rewards per role, MASS champion fitness, per cycle), report.md with a per-cycle table, and JSON series files for `dvc plots`.

    Reads metrics/<cycle>/*.json, data/cycles/<cycle>/pool.jsonl and data/cycles/<cycle>/mass/search.json; a plot whose data is missing says so. Logged to MLflow as the 'campaign/report' run of the campaign's experiment (replaced on every run).

    Example: selfevolve report --root . --out reports
    """
    from selfevolve.config import ParamsError
    from selfevolve.reporting.report import build_report

    setup_logging(verbose)
    try:
        result = build_report(root, out, params_path=params, track=not no_track)
    except (ParamsError, FileNotFoundError) as exc:
        fail(str(exc))
    typer.echo(f"report: {result['report']}")
    for name, path in result["figures"].items():
        typer.echo(f"  {name}: {path}")
