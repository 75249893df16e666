"""Benchmark: held-out Solver accuracy over SAGE cycles, full SAGE against its ablations and a
compute-matched control.

For each variant (full SAGE; no Critic, no Planner, Challenger not trained, Solver not trained:
the switches of ``sage.ablation``; and the *control*: the same training steps on the warm start's
seed data only, no self-labels and no other roles) the same number of cycles runs from the same
base model and seed pool, with the same params otherwise (the same budget), each cycle's stages
called exactly as ``dvc repro`` calls them (``selfevolve.stages.runner.run_stage``). MASS is off by
default so the numbers measure SAGE alone (``--with-mass`` keeps it). After every cycle the model
answers the campaign's held-out questions greedily (``data/cycles/base/heldout.jsonl``: the seed
forms, for retention, and the frontier, never supervised), graded by the math verifier.

Significance: the exact McNemar test (McNemar 1947; two-sided binomial test on the discordant
pairs, ``scipy.stats.binomtest``) of every cycle's model against the base model on the same
questions of each split, and of full SAGE against each variant on the frontier at the last cycle
(``selfevolve.stats.mcnemar_exact``). A change is claimed only at p < 0.05.

The table is printed (Markdown, for the README), written to ``<out>/table.md`` and
``<out>/results.json``, and logged to MLflow (experiment ``<campaign>-sage-benchmark``, one run per
variant with ``heldout_accuracy`` per cycle as steps, the p-values, and the table as artifact).

    .venv/bin/python benchmarks/bench_sage.py                      # needs models/base (make run)
    .venv/bin/python benchmarks/bench_sage.py --variants full,no_critic --cycles 2 --heldout 400

A killed run resumes: finished stages (their metrics file exists) and finished evaluations are
not redone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from selfevolve import runtime_env  # noqa: E402
from selfevolve.stats import mcnemar_exact  # noqa: E402

runtime_env.apply_defaults()

#: variant name -> params overrides (dotted keys): the paper's ablations (SAGE Table 3) and the
#: compute-matched control (every batch replays the warm start's seed data; nothing self-made).
VARIANTS: dict[str, dict[str, object]] = {
    "full": {},
    "no_critic": {"sage.ablation.critic": False},
    "no_planner": {"sage.ablation.planner": False},
    "no_challenger_training": {"sage.ablation.train_challenger": False},
    "no_solver_training": {"sage.ablation.train_solver": False},
    "no_mass": {"mass.enabled": False},
    "control": {"sage.ablation.train_solver": False, "rl.other_roles_fraction": 0.0},
}


def heldout_questions(base: Path, limit: int | None):
    """The campaign's held-out questions (``data/cycles/base/heldout.jsonl``), the first ``limit`` of
    each split."""
    from collections import defaultdict

    from selfevolve.records import Question, read_jsonl

    splits: dict[str, list] = defaultdict(list)
    for q in read_jsonl(base / "data/cycles/base/heldout.jsonl", Question):
        if limit is None or len(splits[q.split or "all"]) < limit:
            splits[q.split or "all"].append(q)
    return [q for qs in splits.values() for q in qs]


def apply_overrides(params_path: Path | None, overrides: list[str]):
    """The params of ``params_path`` (None: the defaults) with each ``a.b.c=value`` applied (value
    parsed as YAML), validated by the schema; exits with the schema's message for an unknown key
    or a bad value."""
    from selfevolve.config import load_params
    from selfevolve.inputs import InputError, parse_assignments

    try:
        return load_params(params_path, overrides=parse_assignments(overrides))
    except InputError as exc:  # names the field and the rule
        raise SystemExit(f"--set: invalid params: {exc}") from None


def prepare_variant(base: Path, vroot: Path, params, name: str, cycles: int, with_mass: bool, eval_dir: Path) -> Path:
    """Variant project: base model and base data linked/copied from ``base``, its own params.yaml.
    A variant folder left by a run with other params is removed (with its cached evaluations)
    so that resuming never mixes settings; one left by a run with fewer (or more) ``--cycles`` and
    otherwise the same params is kept, so a finished run extended by more cycles resumes."""
    import yaml

    (vroot / "models").mkdir(parents=True, exist_ok=True)
    link = vroot / "models" / "base"
    if not link.exists():
        link.symlink_to((base / "models" / "base").resolve(), target_is_directory=True)
    dst = vroot / "data" / "cycles" / "base"
    if not dst.exists():
        shutil.copytree(base / "data" / "cycles" / "base", dst, ignore=shutil.ignore_patterns("eval"))
    p = params.model_dump(mode="json")
    p["cycles"] = {f"c{i}": {"init": "base" if i == 1 else f"c{i - 1}"} for i in range(1, cycles + 1)}
    for key, value in VARIANTS[name].items():
        node = p
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    p["campaign"] = f"{params.campaign}-bench-{name}"
    p["seeds"]["data_dir"] = str((base / params.seeds.data_dir).resolve()) if not Path(params.seeds.data_dir).is_absolute() else params.seeds.data_dir
    if not with_mass:
        p["mass"]["enabled"] = False
    p["evaluation"]["mass_questions"] = 0
    text = yaml.safe_dump(p, sort_keys=False)
    ppath = vroot / "params.yaml"
    if ppath.exists() and _without_cycles(yaml.safe_load(ppath.read_text())) != _without_cycles(yaml.safe_load(text)):
        print(f"  {name}: params changed since the last run: starting this variant afresh", flush=True)
        shutil.rmtree(vroot)
        for f in eval_dir.glob(f"{name}-c*.json"):
            f.unlink()
        return prepare_variant(base, vroot, params, name, cycles, with_mass, eval_dir)
    ppath.write_text(text)
    return ppath


def _without_cycles(params: dict) -> dict:
    """``params`` without its ``cycles`` map (which only lists the cycles and their init)."""
    return {k: v for k, v in params.items() if k != "cycles"}


def run_cycles(vroot: Path, params_path: Path, cycles: int, log) -> None:
    from selfevolve.paths import cycle_paths
    from selfevolve.stages.registry import CYCLE_STAGES
    from selfevolve.stages.runner import run_stage

    for i in range(1, cycles + 1):
        c = f"c{i}"
        for stage in CYCLE_STAGES:
            if stage.name == "evaluate" or cycle_paths(c, vroot).metrics(stage.metrics_file).exists():
                continue
            t = time.time()
            run_stage(stage.name, c, params_path, root=vroot, track=False)
            log(f"  {vroot.name} {c} {stage.name}: {time.time() - t:.0f}s")


def evaluate_model(model_dir: Path, questions, params, cache: Path) -> list[int]:
    """Greedy correctness (0/1) per held-out question; cached in ``cache``."""
    if cache.exists():
        return json.loads(cache.read_text())["correct"]
    from selfevolve.backends import make_backend
    from selfevolve.evaluation.solve import SolveConfig, correctness

    with make_backend(params.model, model_path=str(model_dir)) as backend:
        correct = correctness(backend, questions, SolveConfig.from_params(params))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"model": str(model_dir), "accuracy": sum(correct) / max(1, len(correct)), "correct": correct}))
    return correct


def _acc(xs: list[int]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def build_table(results: dict, cycles: int, overrides: list[str] = ()) -> str:
    """Markdown: per variant and split, accuracy at base and after each cycle, the change and its
    McNemar p against base; and full SAGE against the variant on the frontier at the last cycle."""
    splits = results["splits"]
    last = f"c{cycles}"
    head = ["variant", "split", "base"] + [f"c{i}" for i in range(1, cycles + 1)] + [f"{last} - base", "p vs base",
                                                                                     f"p full vs variant ({last})"]
    setting = ", ".join(f"`{o}`" for o in overrides) or "params as given"
    sizes = ", ".join(f"{len(idx)} {split}" for split, idx in splits.items())
    lines = [f"Held-out Solver accuracy ({sizes}), greedy; exact McNemar tests; {setting}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    pick = lambda xs, idx: [xs[i] for i in idx]  # noqa: E731
    for name, r in results["variants"].items():
        for split, idx in splits.items():
            base = pick(results["base"], idx)
            cells = [name, split, f"{_acc(base):.3f}"] + [f"{_acc(pick(r['cycles'][f'c{i}'], idx)):.3f}" for i in range(1, cycles + 1)]
            cells += [f"{_acc(pick(r['cycles'][last], idx)) - _acc(base):+.3f}", f"{r['p_vs_base'][split][last]:.3g}",
                      "" if name == "full" or split not in r.get("p_full_vs_variant", {}) else f"{r['p_full_vs_variant'][split]:.3g}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def log_mlflow(base: Path, campaign: str, results: dict, table: str, out: Path, cycles: int, overrides: list[str]) -> None:
    """One run per variant in experiment ``<campaign>-sage-benchmark`` of the project's store,
    tagged with the variant and the ``--set`` overrides; a rerun replaces the run with the same
    variant and overrides."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from selfevolve.tracking import experiment_id, tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(base))
    exp_id = experiment_id(client, f"{campaign}-sage-benchmark", base)
    mlflow.set_tracking_uri(tracking_uri(base))
    acc = lambda xs: sum(xs) / len(xs)  # noqa: E731
    setting = " ".join(sorted(overrides)) or "defaults"
    for name, r in results["variants"].items():
        tags = {"selfevolve.variant": name, "selfevolve.overrides": setting}
        flt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        for old in client.search_runs([exp_id], filter_string=flt):
            client.delete_run(old.info.run_id)
        run_name = name if setting == "defaults" else f"{name} ({setting})"
        with mlflow.start_run(experiment_id=exp_id, run_name=run_name, tags=tags):
            mlflow.log_params({"variant": name, **VARIANTS[name], "heldout_n": len(results["base"]), "cycles": cycles,
                               "overrides": setting})
            for split, idx in results["splits"].items():
                mlflow.log_metric(f"heldout_{split}_accuracy", acc([results["base"][i] for i in idx]), step=0)
                for i in range(1, cycles + 1):
                    c = f"c{i}"
                    mlflow.log_metric(f"heldout_{split}_accuracy", acc([r["cycles"][c][j] for j in idx]), step=i)
                    mlflow.log_metric(f"heldout_{split}_p_vs_base", r["p_vs_base"][split][c], step=i)
                if split in r.get("p_full_vs_variant", {}):
                    mlflow.log_metric(f"heldout_{split}_p_full_vs_variant", r["p_full_vs_variant"][split])
            mlflow.log_text(table, "sage_benchmark.md")
            mlflow.log_artifact(str(out / "results.json"))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--root", type=Path, default=ROOT, help="project holding models/base and data/cycles/base (after `make run`)")
    ap.add_argument("--params", type=Path, default=None, help="params file (default <root>/params.yaml)")
    ap.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "no_mass"),
                    help=f"comma-separated, from {', '.join(VARIANTS)} (no_mass differs from full only with --with-mass)")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--heldout", type=int, default=None, help="held-out questions per split (default: all of the campaign's)")
    ap.add_argument("--out", type=Path, default=None, help="work and result folder (default <root>/reports/sage_benchmark)")
    ap.add_argument("--with-mass", action="store_true", help="keep the MASS search + SFT in each cycle")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a param for every variant, e.g. --set rl.select_p=1.0 (YAML value; repeatable)")
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args(argv)
    base = args.root.resolve()
    if not (base / "models" / "base" / "config.json").exists() or not (base / "data/cycles/base/pool.jsonl").exists():
        raise SystemExit(f"{base} has no base model or seed pool: run `make run` (or `dvc repro bootstrap`) there first")
    params = apply_overrides(args.params or base / "params.yaml", args.set)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    out = (args.out or base / "reports" / "sage_benchmark").resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(m, flush=True)  # noqa: E731
    questions = heldout_questions(base, args.heldout)
    splits: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        splits.setdefault(q.split or "all", []).append(i)
    t0 = time.time()
    results = {"heldout_n": len(questions), "cycles": args.cycles, "splits": splits, "variants": {}}
    results["base"] = evaluate_model(base / "models" / "base", questions, params, out / "eval" / "base.json")
    log("base: " + ", ".join(f"{split} {_acc([results['base'][j] for j in idx]):.3f} ({len(idx)} questions)"
                             for split, idx in splits.items()))
    for name in names:
        vroot = out / "variants" / name
        ppath = prepare_variant(base, vroot, params, name, args.cycles, args.with_mass, out / "eval")
        t = time.time()
        run_cycles(vroot, ppath, args.cycles, log)
        r = {"cycles": {}, "p_vs_base": {split: {} for split in splits}}
        for i in range(1, args.cycles + 1):
            c = f"c{i}"
            r["cycles"][c] = evaluate_model(vroot / "models" / c, questions, params, out / "eval" / f"{name}-{c}.json")
            for split, idx in splits.items():
                r["p_vs_base"][split][c] = mcnemar_exact([results["base"][j] for j in idx], [r["cycles"][c][j] for j in idx])[0]
        results["variants"][name] = r
        accs = " ".join(f"{split} {c} {_acc([v[j] for j in idx]):.3f}" for split, idx in splits.items() for c, v in r["cycles"].items())
        log(f"{name}: {accs} ({time.time() - t:.0f}s)")
    last = f"c{args.cycles}"
    if "full" in results["variants"]:
        full = results["variants"]["full"]["cycles"][last]
        for name, r in results["variants"].items():
            if name != "full":
                r["p_full_vs_variant"] = {split: mcnemar_exact([r["cycles"][last][j] for j in idx], [full[j] for j in idx])[0]
                                          for split, idx in splits.items()}
    table = build_table(results, args.cycles, args.set)
    results["seconds"] = round(time.time() - t0, 1)
    (out / "results.json").write_text(json.dumps(results))
    (out / "table.md").write_text(table + "\n")
    print("\n" + table)
    if not args.no_mlflow:
        log_mlflow(base, params.campaign, results, table, out, args.cycles, args.set)
    return results


if __name__ == "__main__":
    main()
