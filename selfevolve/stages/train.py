"""Stages that turn a cycle's records into a better model: ``mass_search``, ``datasets``,
``train_rl``, ``train_sft``, and the ``evaluate`` stage that measures it."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

from selfevolve.config import Params
from selfevolve.paths import cycle_paths
from selfevolve.records import Question, Rollout, read_jsonl, write_json, write_jsonl
from selfevolve.stages.common import base_model, init_model_dir, init_paths, log, make_backend, stage_rng, stage_seed


def mass_search(params: Params, cycle: str, root=".") -> dict:
    """MASS workflow search on ``mass.questions`` questions sampled from the cycle's pool, then
    trajectories of the champion on them (``selfevolve.mass.search.run_mass_stage``).

    Writes ``mass/search.json`` (champion per domain, every design's fitness, history per
    generation), ``mass/champions.json`` and ``mass/trajectories.jsonl``. The previous cycle's
    champions seed this search. With ``mass.enabled = false`` writes empty outputs.
    """
    from selfevolve.mass.search import run_mass_stage

    P, prev = cycle_paths(cycle, root), init_paths(params, cycle, root)
    P.mass_dir.mkdir(parents=True, exist_ok=True)
    if not params.mass.enabled:
        write_json(P.mass_dir / "search.json", {"enabled": False})
        write_json(P.mass_dir / "champions.json", {})
        write_jsonl(P.mass_dir / "trajectories.jsonl", [])
        return {"mass_enabled": 0}
    pool = read_jsonl(P.pool, Question)
    pool = stage_rng(params, cycle, "mass_search").sample(pool, min(len(pool), params.mass.questions))
    prev_champions_path = prev.mass_dir / "champions.json"
    previous = json.loads(prev_champions_path.read_text()) if prev_champions_path.exists() else None
    with make_backend(params, init_model_dir(params, cycle, root)) as backend:
        return run_mass_stage(backend, pool, params, out_dir=P.mass_dir, seed=stage_seed(params, cycle, "mass_search"),
                              previous_champions=previous)


def datasets(params: Params, cycle: str, root=".") -> dict:
    """Build the RL dataset (rollouts with per-role advantages; ablations drop untrained roles;
    no-spread groups skipped) and the SFT dataset (MASS champion trajectories as chats).
    Writes ``rl_dataset.jsonl`` and ``sft_dataset.jsonl``."""
    from selfevolve.training.rl import role_advantages

    P = cycle_paths(cycle, root)
    ab = params.sage.ablation
    rollouts = read_jsonl(P.rollouts, Rollout)
    dropped = {r for r, keep in (("challenger", ab.train_challenger), ("solver", ab.train_solver)) if not keep}
    rl_rows = role_advantages([r for r in rollouts if r.role not in dropped], skip_no_spread=params.rl.skip_no_spread)
    write_jsonl(P.rl_dataset, rl_rows)
    chats = []
    traj_path = P.mass_dir / "trajectories.jsonl"
    if params.mass.enabled and traj_path.exists():
        from selfevolve.mass.sft_data import trajectories_to_chats
        from selfevolve.records import Trajectory

        questions = {q.id: q for q in read_jsonl(P.pool, Question)}
        chats = trajectories_to_chats(read_jsonl(traj_path, Trajectory), questions)
    write_jsonl(P.sft_dataset, [{"messages": c} for c in chats])
    counts = Counter(r.role for r in rl_rows)
    return {"rl_rows": len(rl_rows), "rl_rows_dropped": len(rollouts) - len(rl_rows), "sft_rows": len(chats),
            **{f"rl_rows_{k}": v for k, v in counts.items()}}


def train_rl(params: Params, cycle: str, root=".", on_step=None) -> dict:
    """RL (``rl.algorithm``) from the cycle's starting model on ``rl_dataset.jsonl``; the best
    checkpoint by validation accuracy goes to ``models/<cycle>-rl``."""
    from selfevolve.training import rl as rl_mod

    P = cycle_paths(cycle, root)
    val = read_jsonl(P.val, Question)
    model_dir = init_model_dir(params, cycle, root)
    if params.rl.algorithm == "grpo":
        summary = rl_mod.train_grpo(model_dir, read_jsonl(P.solve_set, Question), val, params, P.rl_model)
    else:
        summary = rl_mod.train_reinforce_pp(model_dir, read_jsonl(P.rl_dataset, Rollout), val, params, P.rl_model, on_step=on_step)
    return {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} | {"rl_trained": int(bool(summary.get("trained")))}


def validation_accuracy(params: Params, model_dir, questions: list[Question], seed: int) -> float:
    """Greedy Solver accuracy of ``model_dir`` on the first ``rl.eval_questions`` validation questions."""
    from selfevolve.evaluation.solve import solve_and_grade

    with make_backend(params, model_dir) as backend:
        _, m = solve_and_grade(backend, questions[: params.rl.eval_questions], params, seed=seed)
    return m["accuracy"]


def train_sft(params: Params, cycle: str, root=".") -> dict:
    """SFT (TRL ``SFTTrainer``) of the RL checkpoint on the MASS trajectories; the result is the
    cycle's model ``models/<cycle>``. With no SFT rows the RL checkpoint is copied unchanged.

    The SFT step is kept only if it does not lower validation accuracy
    (``sft.keep_if_worse`` = false): otherwise ``models/<cycle>`` is the RL checkpoint and
    ``sft_kept`` is 0. Measured here: 40 steps on 18 trajectory chats took held-out accuracy from
    0.34 to 0.055, since the flattened multi-agent chats pull the Solver away from its own format.
    """
    from selfevolve.training.sft import train_sft as _train_sft

    P = cycle_paths(cycle, root)
    chats = [json.loads(line)["messages"] for line in P.sft_dataset.read_text().splitlines() if line.strip()]
    summary = _train_sft(P.rl_model, chats, P.model, params.sft, params.model.lora, seed=params.seed)
    metrics = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    metrics["sft_trained"] = int(bool(summary.get("trained")))
    metrics["sft_kept"] = metrics["sft_trained"]
    if summary.get("trained") and not params.sft.keep_if_worse:
        val = read_jsonl(P.val, Question)
        seed = stage_seed(params, cycle, "train_sft")
        before = validation_accuracy(params, P.rl_model, val, seed)
        after = validation_accuracy(params, P.model, val, seed)
        metrics.update(sft_val_accuracy_before=before, sft_val_accuracy_after=after)
        if after < before:
            log.warning("SFT lowered validation accuracy (%.3f -> %.3f): the cycle keeps the RL checkpoint", before, after)
            shutil.rmtree(P.model)
            shutil.copytree(P.rl_model, P.model)
            metrics["sft_kept"] = 0
    return metrics


def evaluate(params: Params, cycle: str, root=".") -> dict:
    """Benchmarks of ``evaluation.benchmarks`` (default: the held-out set) on ``models/<cycle>``
    (the campaign's base model for cycle ``base``): greedy pass@1 for k = 1, sampled pass@k for
    k > 1, graded by the verifiers (``selfevolve.evaluation.evaluate.evaluate_benchmarks``).
    Writes ``eval/<benchmark>.jsonl`` (per item) and returns ``<benchmark>_<metric>`` metrics
    (always ``heldout_accuracy`` and ``heldout_n`` when ``heldout`` is listed). For a cycle with a
    MASS champion, also the MASS benchmark (``_mass_benchmark``: ``eval/mass.json``, ``mass_*``)."""
    from selfevolve.evaluation.evaluate import evaluate_benchmarks

    P = cycle_paths(cycle, root)
    model_dir = base_model(params, root) if cycle == "base" else P.model
    data_dir = Path(params.seeds.data_dir)
    if not data_dir.is_absolute():
        data_dir = Path(root) / data_dir
    if P.eval_dir.exists():  # the stage owns eval/: no stale files of benchmarks no longer listed
        shutil.rmtree(P.eval_dir)
    champions_path = P.mass_dir / "champions.json"
    with make_backend(params, model_dir) as backend:
        metrics = evaluate_benchmarks(backend, params.evaluation.benchmarks, params, P.eval_dir, heldout_path=P.heldout,
                                      data_dir=data_dir, seed=stage_seed(params, cycle, "evaluate"))
        if cycle != "base" and params.mass.enabled and params.evaluation.mass_questions and champions_path.exists():
            metrics |= _mass_benchmark(backend, params, cycle, champions_path, P)
    return metrics


def _mass_benchmark(backend, params: Params, cycle: str, champions_path: Path, P) -> dict:
    """The cycle's MASS champion vs the single agent on the first ``evaluation.mass_questions``
    held-out questions with the cycle's model (``selfevolve.mass.benchmark``); writes
    ``eval/mass.json``."""
    from selfevolve.mass.benchmark import champion_vs_single_agent
    from selfevolve.mass.design import WorkflowDesign
    from selfevolve.mass.search import stage_verify_fn

    champions = {d: WorkflowDesign.model_validate(obj) for d, obj in json.loads(champions_path.read_text()).items()}
    held = read_jsonl(P.heldout, Question)[: params.evaluation.mass_questions]
    rows, metrics = champion_vs_single_agent(backend, champions, held, params.mass, stage_verify_fn(params),
                                             max_model_len=params.model.max_model_len,
                                             max_new_tokens=params.evaluation.max_new_tokens,
                                             seed=stage_seed(params, cycle, "evaluate-mass"))
    write_json(P.eval_dir / "mass.json", rows)
    return metrics
