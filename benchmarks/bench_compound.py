"""Benchmark of compounding: does every cycle move the model further up the ladder, and does MASS
carry it further than SAGE alone?

For each seed (``--seeds``) a project of its own (``<out>/seed<S>``: the given params with ``seed``
set) builds its base: the ``seeds``, ``bootstrap`` and ``evaluate_base`` stages, called as
``dvc repro`` calls them. From that base, ``benchmarks/bench_sage.py`` runs ``--cycles`` cycles of
each variant: ``full`` (SAGE + MASS), ``no_mass`` (the same without the MASS search and SFT) and
``control`` (the same training budget on the warm start's data only: nothing the cycles made).
Every cycle's model then answers all held-out questions greedily (seed forms, the frontier and the
rungs beyond it, none of the unsupervised ones ever trained on).

Per seed, variant and cycle: accuracy per split and per rung (question form), ``reach_50`` /
``reach_90`` (``selfevolve.questions.arith.reach``: the longest unsupervised sum, in operand
digits, answered right at least half / nine tenths of the time), and the exact McNemar test of the cycle against the
previous one (the base for c1) on the unsupervised questions (frontier + beyond); at the last
cycle, full against no_mass on the rungs beyond the frontier's first rung, and full against
control. What MASS-on cycles end with is a model *and* the workflow its last search kept: that
champion, run with the last cycle's model on the unsupervised questions, is compared with
no_mass's single pass too (accuracy beyond the first rung, McNemar, reach). Written to ``<out>/compound.md`` (the README's table), ``<out>/compound.json`` and
``<out>/compound.png`` (reach and unsupervised accuracy per cycle, one line per seed and variant).

    make bench-compound                                   # 6 cycles, seeds 0 and 1, held-out ladder to 10+10 (hours on 2 cores)
    .venv/bin/python benchmarks/bench_compound.py --seeds 0 --cycles 3 --variants full,no_mass

``--set`` overrides shape the base too: ``make bench-compound`` draws the held-out rungs beyond
the frontier to 10+10 (``seeds.arith.reach_levels``), since by c3 the default ladder's top (8+8, a
reach of 16 digits) is where a lineage stands and its c4 distillation teaches 9-digit sums. A
killed run resumes (finished base stages, cycles and evaluations are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_sage  # noqa: E402

from selfevolve.stats import mcnemar_exact  # noqa: E402

UNSUPERVISED = ("frontier", "beyond")


def build_base(root: Path, params_file: Path, seed: int, log, overrides: list[str] = ()) -> Path:
    """``root`` as a project whose base cycle is built for ``seed`` from ``params_file`` with the
    ``--set`` ``overrides`` (``a.b=value``), which shape the base too (the held-out ladder of
    ``seeds.arith.reach_levels``); resumes a finished one. Returns its params.yaml; exits when
    ``root`` was built with other params."""
    import yaml

    from selfevolve.paths import cycle_paths
    from selfevolve.stages.registry import BASE_STAGES
    from selfevolve.stages.runner import run_stage

    root.mkdir(parents=True, exist_ok=True)
    params = bench_sage.apply_overrides(params_file, list(overrides)).model_dump(mode="json")
    params["seed"] = seed
    params["campaign"] = f"{params['campaign']}-compound-seed{seed}"
    if not Path(params["seeds"]["data_dir"]).is_absolute():
        params["seeds"]["data_dir"] = str((params_file.parent / params["seeds"]["data_dir"]).resolve())
    text = yaml.safe_dump(params, sort_keys=False)
    ppath = root / "params.yaml"
    if ppath.exists() and ppath.read_text() != text:
        raise SystemExit(f"{root} was built with other params: remove it or choose another --out")
    ppath.write_text(text)
    for stage in BASE_STAGES:
        if not cycle_paths("base", root).metrics(stage.metrics_file).exists():
            log(f"seed {seed}: {stage.name}")
            run_stage(stage.name, "base", ppath, root=root, track=False)
    return ppath


def rung_accuracy(correct: list[int], questions) -> dict[str, float]:
    """Greedy accuracy per unsupervised question form (``form`` of the frontier and beyond
    splits) of one model's 0/1 outcomes."""
    forms: dict[str, list[int]] = {}
    for c, q in zip(correct, questions):
        if q.form and q.split in UNSUPERVISED:
            forms.setdefault(q.form, []).append(c)
    return {f: sum(v) / len(v) for f, v in forms.items()}


def compounding(results: dict, questions) -> dict:
    """Per variant and cycle (``base`` first): accuracy per split, per rung, reach, and McNemar
    against the previous cycle on the unsupervised questions."""
    from selfevolve.questions.arith import reach

    unsup = [i for i, q in enumerate(questions) if q.split in UNSUPERVISED]
    out = {}
    for name, r in results["variants"].items():
        series = [("base", results["base"])] + [(c, r["cycles"][c]) for c in sorted(r["cycles"], key=lambda c: int(c[1:]))]
        rows = []
        for k, (cycle, correct) in enumerate(series):
            rungs = rung_accuracy(correct, questions)
            row = {"cycle": cycle, "reach_50": reach(rungs, 0.5), "reach_90": reach(rungs, 0.9), "rungs": rungs,
                   **{split: sum(correct[i] for i in idx) / len(idx) for split, idx in results["splits"].items()},
                   "unsupervised": sum(correct[i] for i in unsup) / max(1, len(unsup))}
            if k:
                prev = series[k - 1][1]
                p, up, down = mcnemar_exact([prev[i] for i in unsup], [correct[i] for i in unsup])
                row.update(p_vs_previous=p, up_vs_previous=up, down_vs_previous=down)
            rows.append(row)
        out[name] = rows
    return out


def pairwise_last(results: dict, questions, a: str, b: str, first_rung: str = "4+3") -> dict | None:
    """``a`` against ``b`` at the last cycle on the unsupervised questions beyond ``first_rung``
    (and its mirror): accuracies and the exact McNemar p."""
    from selfevolve.questions.arith import rung_size

    v = results["variants"]
    if a not in v or b not in v:
        return None
    last = max(v[a]["cycles"], key=lambda c: int(c[1:]))
    idx = [i for i, q in enumerate(questions) if q.split in UNSUPERVISED and q.form and rung_size(q.form) > rung_size(first_rung)]
    xa, xb = [v[a]["cycles"][last][i] for i in idx], [v[b]["cycles"][last][i] for i in idx]
    p, up, down = mcnemar_exact(xb, xa)
    return {"cycle": last, "n": len(idx), a: sum(xa) / max(1, len(idx)), b: sum(xb) / max(1, len(idx)), "p": p,
            f"only_{a}": up, f"only_{b}": down}


def champion_correctness(vroot: Path, cycle: str, questions, params, cache: Path) -> dict | None:
    """The MASS champion workflow of ``vroot``'s ``cycle`` run greedily with that cycle's model on
    ``questions``, as the ``evaluate`` stage runs it (``selfevolve.mass.fitness.evaluate_design``,
    limits not enforced): ``{"design_id", "agents", "correct": [0/1 per question]}``, cached in
    ``cache``; None when the cycle wrote no champion (a variant without MASS)."""
    if cache.exists():
        return json.loads(cache.read_text())
    from selfevolve.backends import make_backend
    from selfevolve.mass.design import DesignLimits, load_champions
    from selfevolve.mass.fitness import greedy_runs
    from selfevolve.paths import cycle_paths
    from selfevolve.verifiers.grading import verify_fn

    paths = cycle_paths(cycle, vroot)
    if not paths.mass_champions.exists():
        return None
    design = load_champions(paths.mass_champions)[questions[0].domain]  # the arith ladder: one domain
    limits = DesignLimits.from_params(params.mass, max_model_len=params.model.max_model_len,
                                      max_new_tokens=params.evaluation.max_new_tokens,
                                      question_chars=max(len(q.text) for q in questions))
    with make_backend(params.model, model_path=str(paths.model)) as backend:
        runs = greedy_runs(backend, design, questions, verify_fn=verify_fn(params.verifiers), limits=limits,
                           seed=params.seed)[1]
    out = {"design_id": design.design_id, "agents": design.agent_ids, "correct": [int(bool(t.correct)) for t in runs]}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out))
    return out


def champion_vs(results: dict, questions, champion: dict | None, b: str, first_rung: str = "4+3") -> dict | None:
    """The last cycle's MASS champion workflow (``champion``: :func:`champion_correctness` on the
    unsupervised questions) against variant ``b``'s single pass at that cycle, on the unsupervised
    questions beyond ``first_rung``: accuracies, the exact McNemar p, and both reaches (``reach_50`` /
    ``reach_90`` over all the unsupervised rungs)."""
    from selfevolve.questions.arith import reach, rung_size

    v = results["variants"]
    if champion is None or b not in v:
        return None
    last = max(v[b]["cycles"], key=lambda c: int(c[1:]))
    unsup = [i for i, q in enumerate(questions) if q.split in UNSUPERVISED]
    team = dict(zip(unsup, champion["correct"]))
    idx = [i for i in unsup if questions[i].form and rung_size(questions[i].form) > rung_size(first_rung)]
    xa, xb = [team[i] for i in idx], [v[b]["cycles"][last][i] for i in idx]
    p, up, down = mcnemar_exact(xb, xa)
    team_rungs = rung_accuracy([team[i] for i in unsup], [questions[i] for i in unsup])
    one_rungs = rung_accuracy(v[b]["cycles"][last], questions)
    return {"cycle": last, "n": len(idx), "design": "->".join(champion["agents"]), "champion": sum(xa) / max(1, len(idx)),
            b: sum(xb) / max(1, len(idx)), "p": p, "only_champion": up, f"only_{b}": down, "champion_rungs": team_rungs,
            "reach": {"champion": [reach(team_rungs, 0.5), reach(team_rungs, 0.9)], b: [reach(one_rungs, 0.5), reach(one_rungs, 0.9)]}}


def table(per_seed: dict) -> str:
    """Markdown: one row per seed, variant and cycle."""
    lines = ["| seed | variant | cycle | seed forms | frontier | beyond | reach 50 % | reach 90 % | p vs previous (unsupervised) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for seed, data in per_seed.items():
        for name, rows in data["compounding"].items():
            for r in rows:
                p = r.get("p_vs_previous")
                lines.append(f"| {seed} | {name} | {r['cycle']} | {r.get('seed', float('nan')):.3f} | {r.get('frontier', float('nan')):.3f} | "
                             f"{r.get('beyond', float('nan')):.3f} | {r['reach_50']} | {r['reach_90']} | "
                             + ("" if p is None else f"{p:.2g} (+{r['up_vs_previous']}/-{r['down_vs_previous']})") + " |")
    for seed, data in per_seed.items():
        for key, cmp in data["pairwise"].items():
            if cmp:
                a, b = key.split("_vs_")
                a_name = f"full's MASS champion ({cmp['design']}) with its model" if a == "champion" else f"{a} (single pass)"
                lines.append(f"\nSeed {seed}, {cmp['cycle']}, {a_name} vs {b} (single pass) on {cmp['n']} unsupervised questions "
                             f"beyond 4+3: {cmp[a]:.3f} vs {cmp[b]:.3f}, exact McNemar p = {cmp['p']:.2g}"
                             + (f"; reach 50 % / 90 %: {'/'.join(map(str, cmp['reach'][a]))} vs {'/'.join(map(str, cmp['reach'][b]))}."
                                if "reach" in cmp else "."))
    return "\n".join(lines)


def figure(per_seed: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for seed, data in per_seed.items():
        for name, rows in data["compounding"].items():
            xs = list(range(len(rows)))
            ax1.plot(xs, [r["reach_50"] for r in rows], marker="o", label=f"seed {seed} {name}")
            ax2.plot(xs, [r["unsupervised"] for r in rows], marker="o", label=f"seed {seed} {name}")
    cycles = max((len(rows) for d in per_seed.values() for rows in d["compounding"].values()), default=1)
    for ax, title in ((ax1, "reach: longest sum right half of the time (operand digits)"),
                      (ax2, "accuracy on unsupervised rungs (frontier + beyond)")):
        ax.set_xticks(range(cycles), ["base"] + [f"c{i}" for i in range(1, cycles)])
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--seeds", default="0,1", help="comma-separated campaign seeds, each with its own warm start")
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--variants", default="full,no_mass,control")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "compound")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a param (repeatable)")
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args(argv)
    from selfevolve import runtime_env

    runtime_env.apply_defaults()
    log = lambda m: print(m, flush=True)  # noqa: E731
    out = args.out.resolve()
    per_seed = {}
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        root = out / f"seed{seed}"
        ppath = build_base(root, args.params.resolve(), seed, log, args.set)
        extra = ["--no-mlflow"] if args.no_mlflow else []
        for item in args.set:
            extra += ["--set", item]
        results = bench_sage.main(["--root", str(root), "--params", str(ppath), "--variants", args.variants, "--cycles",
                                   str(args.cycles), "--with-mass", "--out", str(root / "bench"), *extra])
        questions = bench_sage.heldout_questions(root, None)
        assert len(questions) == results["heldout_n"]
        champion = None
        if "full" in results["variants"]:  # what MASS-on cycles end with: a model and the workflow its search kept
            from selfevolve.config import load_params

            unsup = [q for q in questions if q.split in UNSUPERVISED]
            champion = champion_correctness(root / "bench" / "variants" / "full", f"c{args.cycles}", unsup,
                                            load_params(ppath), root / "bench" / "eval" / f"full-c{args.cycles}-champion.json")
        per_seed[seed] = {"compounding": compounding(results, questions),
                          "pairwise": {"full_vs_no_mass": pairwise_last(results, questions, "full", "no_mass"),
                                       "full_vs_control": pairwise_last(results, questions, "full", "control"),
                                       "champion_vs_no_mass": champion_vs(results, questions, champion, "no_mass")}}
    text = table(per_seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compound.md").write_text(text + "\n")
    (out / "compound.json").write_text(json.dumps(per_seed, indent=1))
    figure(per_seed, out / "compound.png")
    print("\n" + text)
    return per_seed


if __name__ == "__main__":
    main()
