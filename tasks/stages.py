"""One Prefect task per stage. Each reproduces its DVC stage with ``dvc repro --single-item``, so
a run through Prefect leaves ``dvc.lock`` and the outputs exactly as ``dvc repro`` would, and a
stage whose inputs did not change is skipped by DVC. Transient failures are retried.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prefect import get_run_logger, task

ROOT = Path(__file__).resolve().parents[1]


def run_logged(args: list[str], root: str | Path, what: str) -> None:
    """Run ``args`` in ``root`` with the venv on PATH, streaming output to the Prefect log.
    Raises ``RuntimeError`` (with the last lines of output) on a non-zero exit."""
    logger = get_run_logger()
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    proc = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    tail: list[str] = []
    for line in proc.stdout:  # type: ignore[union-attr]
        line = line.rstrip()
        if line and "it/s]" not in line and "s/it]" not in line:
            logger.info(line)
        tail = (tail + [line])[-30:]
    if proc.wait() != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def reproduce(stage_id: str, root: str | Path = ROOT) -> str:
    """``dvc repro --single-item <stage_id>`` in ``root`` (skipped by DVC when nothing changed)."""
    run_logged([sys.executable, "-m", "dvc", "repro", "--single-item", stage_id], root, f"stage {stage_id}")
    return stage_id


def _stage_task(stage: str):
    @task(name=stage, retries=1, retry_delay_seconds=5, task_run_name=f"{stage}" + "[{cycle}]")
    def run(cycle: str | None = None, root: str = str(ROOT)) -> str:
        return reproduce(stage if cycle is None else f"{stage}@{cycle}", root)

    run.__doc__ = f"Reproduce the DVC stage '{stage}' (for one cycle when given)."
    return run


seeds = _stage_task("seeds")
bootstrap = _stage_task("bootstrap")
evaluate_base = _stage_task("evaluate_base")
challenge = _stage_task("challenge")
critic_questions = _stage_task("critic_questions")
plan = _stage_task("plan")
critic_plans = _stage_task("critic_plans")
solve = _stage_task("solve")
verify = _stage_task("verify")
rewards = _stage_task("rewards")
mass_search = _stage_task("mass_search")
datasets = _stage_task("datasets")
train_rl = _stage_task("train_rl")
train_sft = _stage_task("train_sft")
evaluate = _stage_task("evaluate")



@task(name="report", retries=1, retry_delay_seconds=5)
def report(root: str = str(ROOT)) -> str:
    """``selfevolve report``: plots and markdown for the campaign so far (reports/), logged to MLflow."""
    run_logged([str(Path(sys.executable).parent / "selfevolve"), "report", "--root", root], root, "report")
    return f"{root}/reports/report.md"


CYCLE_TASKS = [challenge, critic_questions, plan, critic_plans, solve, verify, rewards, mass_search, datasets, train_rl,
               train_sft, evaluate]
