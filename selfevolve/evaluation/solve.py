"""Answer questions with a model and grade the answers: the one solve-and-grade routine that the
``evaluate`` stage, checkpoint validation in training and the benchmarks share.

``evaluate_questions(backend, questions, SolveConfig.from_params(params), k=1)``:

1. **Prompts.** One template per benchmark family in ``selfevolve/prompts/evaluation``
   (``math`` for GSM8K/MATH/OlympiadBench, ``code`` for HumanEval-style completion of a function
   signature, ``mbpp`` for MBPP with its test asserts shown). The held-out set and question files
   use the Solver role's own prompt (``selfevolve/prompts/roles/solver.j2``), the prompt the model
   is trained with, so held-out and validation numbers are comparable. Every prompt asks for the
   answer inside ``<answer></answer>``.
2. **Sampling.** ``k == 1``: one greedy completion per question (pass@1). ``k > 1``: ``n = k``
   samples per question at the config's ``temperature`` / ``top_p``, and pass@k with the unbiased
   estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1). Generation
   runs in chunks of about the config's ``batch_size`` rows (prompts x samples) per call.
3. **Grading.** The ``<answer>`` content is parsed with ``selfevolve.roles.parsers.parse_solver`` and
   graded by ``selfevolve.verifiers.grading.verify_answers`` (math grader; code sandbox). For
   HumanEval the program is the prompt plus the model's body or whole function
   (``selfevolve.verifiers.programs``). A completion without an ``<answer>`` is wrong (``no_answer``).

``selfevolve.evaluation.metrics.summarise`` turns the per-question rows into metrics (the shape
``selfevolve grade`` reports too): ``n``, ``samples``, ``accuracy``, ``pass_at_1``, ``pass_at_<k>``,
``answered_rate``, ``truncated_rate``, ``mean_output_tokens``, ``accuracy_<category>_<value>``
(``Question.categories()``). pass@k is spelled ``pass_at_k`` because MLflow metric names may not
contain ``@``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict

from selfevolve import prompting
from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig
from selfevolve.config import Params, VerifierParams
from selfevolve.records import CodeSpec, Question
from selfevolve.roles import parsers
from selfevolve.roles.forcing import force_missing_answers
from selfevolve.seeding import derive_seed
from selfevolve.stats import pass_at_k
from selfevolve.evaluation.metrics import metric_name, summarise
from selfevolve.verifiers.grading import verify_answers
from selfevolve.verifiers.programs import code_program, humaneval_completion

log = logging.getLogger("selfevolve")

#: Spec name of the campaign's held-out set.
HELDOUT = "heldout"
#: Prompt name meaning "the Solver role's template" (``selfevolve/prompts/roles/solver.j2``).
SOLVER_PROMPT = "solver"
#: Canonical benchmark name (``Question.source`` is ``benchmark:<name>``) -> prompt template
#: in ``selfevolve/prompts/evaluation`` (``<prompt>.j2``), or ``SOLVER_PROMPT``.
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


def build_messages(question: Question, prompt: str, worked_example: bool = False,
                   example_set: str | None = None) -> Messages:
    """The one-turn chat for ``question`` with template ``prompt`` (``SOLVER_PROMPT`` or a name in
    ``selfevolve/prompts/evaluation``). Template fields: ``question`` (text), ``prompt``
    (HumanEval's function signature + docstring, else the text), ``problem`` (MBPP task
    description, else the text), ``tests`` (code test statements), ``entry_point``, ``domain``,
    ``meta``. With ``worked_example`` the Solver's worked exchanges come first
    (``selfevolve.roles.templates.chat``; ``example_set``'s where the Solver has them). Raises ``jinja2.TemplateNotFound`` for an unknown template."""
    from selfevolve.roles.templates import chat, messages

    if prompt == SOLVER_PROMPT:
        return messages("solver", worked_example, example_set, question=question.text, domain=question.domain, plan=None)
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
    return chat("solver", prompting.render(f"evaluation/{prompt}", **fields), worked_example, question.domain, example_set)


def graded_answer(question: Question, completion: str) -> tuple[str | None, float]:
    """``(answer to verify, format reward)`` for one completion.

    Math: the ``<answer>`` content (``parsers.parse_solver``). Code: the program to run
    (``selfevolve.verifiers.grading.code_program``): for HumanEval prompt + completion (see
    :func:`humaneval_completion`), else the ``<answer>`` code. ``None`` when there is no answer."""
    parsed = parsers.parse_solver(completion, question.domain)
    if question.domain != "code" or parsed.answer is None:
        return parsed.answer, parsed.format_reward
    is_humaneval = question.source.split(":")[-1] == "humaneval" and isinstance(question.meta.get("prompt"), str)
    if is_humaneval:
        code = parsers.answer_code(completion) or parsed.answer
        return code_program(question, humaneval_completion(question, code)), parsed.format_reward
    return code_program(question, parsed.answer), parsed.format_reward


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
        res = backend.chat(chunk, sampling.model_copy(update={"seed": derive_seed(seed, b)}))
        if len(res) != len(chunk) or any(len(r) != sampling.n for r in res):
            raise RuntimeError(f"backend {getattr(backend, 'name', backend)!r} returned {[len(r) for r in res]} completions "
                               f"for {len(chunk)} prompts x n={sampling.n}")
        out.extend(res)
        log.debug("generated %d/%d prompts", min(start + per_call, len(conversations)), len(conversations))
    return out


class SolveConfig(BaseModel):
    """What :func:`evaluate_questions` reads, and nothing else (built from a campaign's ``Params``
    by :meth:`from_params`; no field has a default of its own, so the params schema stays the one
    place defaults live).

    ``temperature`` / ``top_p``: sampling for k > 1 (k = 1 is greedy); ``max_new_tokens``: per
    completion; ``batch_size``: rows (prompts x samples) per backend call; ``worked_examples``: show
    a worked exchange before each question of ``seed_set`` (the campaign's seed set name, whose
    exchanges are shown; a benchmark's questions get their domain's); ``force_answer_tokens``:
    answer forcing's budget (0 = off, ``roles.forcing``); ``verifiers``: the grader and sandbox
    limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float
    top_p: float
    max_new_tokens: int
    batch_size: int
    worked_examples: bool
    force_answer_tokens: int
    seed_set: str
    verifiers: VerifierParams

    @classmethod
    def from_params(cls, params: Params) -> "SolveConfig":
        """``sampling`` (temperature, top_p, force_answer_tokens), ``evaluation`` (max_new_tokens,
        batch_size), ``model.worked_examples``, ``seeds.set`` and ``verifiers`` of a campaign."""
        return cls(temperature=params.sampling.temperature, top_p=params.sampling.top_p,
                   max_new_tokens=params.evaluation.max_new_tokens, batch_size=params.evaluation.batch_size,
                   worked_examples=params.model.worked_examples, force_answer_tokens=params.sampling.force_answer_tokens,
                   seed_set=params.seeds.set, verifiers=params.verifiers)


def evaluate_questions(backend: Backend, questions: Sequence[Question], config: SolveConfig, *, k: int = 1,
                       prompt: str | None = None, spec_name: str | None = None, seed: int = 0,
                       max_new_tokens: int | None = None, batch_size: int | None = None) -> tuple[list[dict], dict]:
    """Answer, grade and score ``questions`` (see the module docstring for sampling and grading)
    under ``config`` (:class:`SolveConfig`; ``max_new_tokens`` / ``batch_size`` override its own).

    ``prompt``: a template name for every question (default: :func:`prompt_for` per question).
    Returns ``(rows, metrics)``: one row per question, in order, with ``id``, ``source``, ``domain``,
    ``level``, ``categories``, ``prompt_template``, ``completions``, ``finish_reasons``,
    ``output_tokens``, ``answers`` (what was verified: the math answer or the program; None when
    unanswered), ``answered``, ``correct`` (0/1 per sample), ``status``, ``detail``, ``c``
    (correct samples) and ``pass_at_k``; ``metrics`` from :func:`summarise` (unprefixed).
    Raises ``ValueError`` for ``k < 1``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    questions = list(questions)
    if not questions:
        return [], summarise([], {1, k})
    new_tokens = max_new_tokens or config.max_new_tokens
    if k == 1:
        sp = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=new_tokens, n=1)
    else:
        if config.temperature == 0:
            log.warning("pass@%d with temperature 0: the %d samples are identical, pass@%d = pass@1", k, k, k)
        sp = SamplingConfig(temperature=config.temperature, top_p=config.top_p, max_new_tokens=new_tokens, n=k)
    templates = [prompt or prompt_for(q, spec_name) for q in questions]
    # held-out questions of the campaign's seed set get that set's worked exchanges; a benchmark's its domain's
    convs = [build_messages(q, t, config.worked_examples,
                            None if (q.source or "").startswith("benchmark:") else config.seed_set)
             for q, t in zip(questions, templates)]
    comps = generate(backend, convs, sp, batch_size or config.batch_size, seed=seed)
    forced = force_missing_answers(backend, questions, convs, comps, config.force_answer_tokens, seed)  # in place

    flat_q: list[Question] = []
    flat_a: list[str | None] = []
    flat_ids: list[str] = []
    for q, cs in zip(questions, comps):
        for j, c in enumerate(cs):
            ans, _ = graded_answer(q, c.text)
            flat_q.append(q)
            flat_a.append(ans)
            flat_ids.append(f"{q.id}-s{j}")
    verdicts = verify_answers(flat_q, flat_a, config.verifiers, ids=flat_ids)

    rows: list[dict] = []
    i = 0
    for q, t, cs, fs in zip(questions, templates, comps, forced):
        vs = verdicts[i:i + len(cs)]
        answers = flat_a[i:i + len(cs)]
        correct = [int(v.correct >= 1.0) for v in vs]
        rows.append({
            "id": q.id, "source": q.source, "domain": q.domain, "level": q.level, "categories": q.categories(),
            "prompt_template": t, "completions": [c.text for c in cs], "finish_reasons": [c.finish_reason for c in cs],
            "output_tokens": [c.output_tokens for c in cs], "forced": fs, "answers": answers, "answered": [int(a is not None) for a in answers],
            "correct": correct, "status": [v.status for v in vs], "detail": [v.detail for v in vs],
            "c": sum(correct), "pass_at_k": pass_at_k(len(correct), sum(correct), k),
        })
        i += len(cs)
    return rows, summarise(rows, {1, k})


def correctness(backend: Backend, questions: Sequence[Question], config: SolveConfig, seed: int = 0) -> list[int]:
    """Greedy 0/1 outcome per question (:func:`evaluate_questions` with k = 1): what checkpoint
    validation compares between steps (paired, so a McNemar test applies)."""
    rows, _ = evaluate_questions(backend, questions, config, k=1, seed=seed)
    return [r["correct"][0] for r in rows]
