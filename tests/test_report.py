"""`selfevolve report`: plots, markdown and dvc-plots series from a campaign's outputs.

The campaign tree is fake but written in the exact formats the stages write: metrics dicts with the
keys of the stage modules (``selfevolve/stages/challenge.py``, ``critic.py``, ``solve.py``,
``rewards.py``, ``train.py``, ``evaluate.py``) and of ``selfevolve/mass/search.py``, pools as
``Question`` JSONL with ``measured`` pass rates (``rewards``), MASS ``search.json`` as a real
``SearchResult`` dump.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import yaml

from selfevolve.config import default_params_dict
from selfevolve.reporting.figures import FIGURES
from selfevolve.reporting.report import build_report
from selfevolve.reporting.series import SERIES
from selfevolve.records import MathSpec, PassRate, Question, write_json, write_jsonl

CYCLES = ["c1", "c2"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_params(root: Path, campaign: str = "report-test", mass_enabled: bool = True) -> None:
    root.mkdir(parents=True, exist_ok=True)
    p = default_params_dict()
    p["campaign"] = campaign
    p["cycles"] = {"c1": {"init": "base"}, "c2": {"init": "c1"}}
    p["mass"]["enabled"] = mass_enabled
    p["evaluation"]["benchmarks"] = [{"name": "heldout", "limit": 40, "k": 1}, {"name": "gsm8k", "limit": 20, "k": 4}]
    (root / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def _question(i: int, level: int, source: str, cycle: int | None, pass_rate: float | None, measured_in: str | None) -> Question:
    measured = None if pass_rate is None else PassRate(pass_rate=pass_rate, samples=5, cycle=measured_in)
    return Question(id=f"{source.split(':')[0]}-{i:04d}", domain="math", text=f"Compute {i} + {level * 7}.",
                    spec=MathSpec(answer=str(i + level * 7)), level=level, source=source, cycle=cycle, measured=measured)


def _search_json(cycle_index: int, fitness: list[float]) -> dict:
    """A ``SearchResult`` as the ``mass_search`` stage writes it: single-agent reference, a champion and
    one history record per generation."""
    from selfevolve.mass.design import planner_solver, single_agent
    from selfevolve.mass.fitness import DesignEvaluation
    from selfevolve.mass.search import SearchResult

    def ev(design, gen, fit, origin):
        return DesignEvaluation(design=design, design_id=design.design_id, domain="math", generation=gen, origin=origin,
                                fitness=fit, quality=fit, accuracy=fit, judged_score=None, n_runs=16, n_verified=16,
                                completed_rate=1.0, mean_output_tokens=40.0 + gen, accuracy_per_1k_tokens=fit / 0.04)

    ref = ev(single_agent("math"), 0, 0.25 + 0.05 * cycle_index, "seed")
    champ = ev(planner_solver("math"), len(fitness) - 1, fitness[-1], "seed")
    history = [{"domain": "math", "generation": g, "champion": champ.design_id, "champion_fitness": f, "champion_accuracy": f,
                "champion_accuracy_per_1k_tokens": f / 0.04, "champion_mean_output_tokens": 40.0, "best_child_fitness": f,
                "population": [champ.design_id, ref.design_id], "population_fitness": [f, ref.fitness], "children": 2,
                "rejected_total": 1, "model_accepted": 0, "model_merges": 0} for g, f in enumerate(fitness)]
    res = SearchResult(champions={"math": champ.design}, champion_evaluations={"math": champ}, evaluated=[ref, champ],
                       history=history, rejected=[{"domain": "math", "generation": "1", "origin": "model", "reason": "no <design> block"}],
                       seed=cycle_index)
    return res.model_dump(mode="json")


def build_fake_campaign(root: Path, mass_enabled: bool = True, frontier: bool = False) -> Path:
    """A 2-cycle campaign's outputs under ``root`` (see module docstring)."""
    rng = random.Random(0)
    _write_params(root, mass_enabled=mass_enabled)
    # base: seed pool (levels 1-5, no pass rates yet), held-out and gsm8k evaluation of the base model
    pool = [_question(i, 1 + i % 5, "seed:arith", None, None, None) for i in range(50)]
    write_jsonl(root / "data/cycles/base/pool.jsonl", pool)
    write_json(root / "metrics/base/seeds.json", {"pool": 50, "val": 20, "heldout": 40, "stage_seconds": 0.1})
    accs = {"base": 0.20, "c1": 0.35, "c2": 0.45}
    for c in ["base", *CYCLES]:
        a = accs[c]
        write_json(root / f"metrics/{c}/evaluate.json", {
            "heldout_n": 40, "heldout_samples": 40, "heldout_accuracy": a, "heldout_pass_at_1": a, "heldout_answered_rate": 0.9,
            "heldout_truncated_rate": 0.05, "heldout_mean_output_tokens": 31.5, "heldout_accuracy_level_1": min(1.0, a + 0.4),
            "heldout_accuracy_level_5": a / 2, "gsm8k_n": 20, "gsm8k_samples": 80, "gsm8k_accuracy": a / 4,
            "gsm8k_pass_at_1": a / 4, "gsm8k_pass_at_4": a / 2, "stage_seconds": 3.2,
            **({"heldout_frontier_accuracy": a / 2, "heldout_frontier_n": 20, "heldout_seed_accuracy": 0.95, "heldout_seed_n": 20,
                "heldout_accuracy_form_4_3": a / 2, "heldout_accuracy_form_2_2": 0.95}
               if frontier else {})})
    for idx, c in enumerate(CYCLES, 1):
        measured = [q.model_copy(deep=True) for q in pool]
        for q in measured:
            q.measured = PassRate(pass_rate=round(max(0.0, 1 - 0.2 * q.level + rng.uniform(-0.1, 0.1)), 2), samples=5, cycle=c)
        new = [_question(1000 * idx + i, 3 + i % 4, "challenger", idx, round(rng.uniform(0, 0.6), 2), c) for i in range(6 + 4 * idx)]
        pool = measured + new
        write_jsonl(root / f"data/cycles/{c}/pool.jsonl", pool)
        write_json(root / f"metrics/{c}/challenge.json", {"challenger_rollouts": 48, "challenger_parsed_rate": 0.8,
                                                          "challenger_spec_valid_rate": 0.7, "challenger_format_reward": 0.85})
        write_json(root / f"metrics/{c}/critic_questions.json", {"critic_question_pass_rate": 0.3 + 0.1 * idx,
                                                                 "critic_question_mean_score": 0.6, "critic_question_format_reward": 0.9,
                                                                 "questions_scored": 40, "questions_accepted": 12 + 4 * idx})
        write_json(root / f"metrics/{c}/critic_plans.json", {"critic_plan_pass_rate": 0.5 + 0.1 * idx, "critic_plan_mean_score": 0.55,
                                                             "plans_scored": 60})
        write_json(root / f"metrics/{c}/verify.json", {"solver_accuracy": 0.3 + 0.1 * idx, "questions_with_a_correct_sample": 0.6,
                                                       "groups_with_reward_spread": 0.4})
        write_json(root / f"metrics/{c}/rewards.json", {
            "reward_challenger": 0.5 + 0.05 * idx, "reward_planner": 0.6, "reward_solver": 0.4 + 0.1 * idx, "reward_critic": 0.9,
            "pool_size": len(pool), "pool_growth": len(new), "pool_duplicates_removed": 1, "pool_challenger_questions": sum(q.source == "challenger" for q in pool),
            "pool_mean_pass_rate": 0.45, "solver_groups_with_spread": 0.5, "stage_seconds": 0.4})
        write_json(root / f"metrics/{c}/train_rl.json", {"steps": 60, "best_step": 40, "best_val_accuracy": 0.3 + 0.1 * idx,
                                                         "initial_val_accuracy": 0.25, "rl_trained": 1})
        mass_dir = root / f"data/cycles/{c}/mass"
        if mass_enabled:
            write_json(mass_dir / "search.json", _search_json(idx, [0.3 + 0.1 * idx, 0.35 + 0.1 * idx, 0.4 + 0.1 * idx]))
            write_json(root / f"metrics/{c}/mass_search.json", {
                "mass_questions": float(len(pool)), "mass_trajectories": 40.0, "mass_trajectories_kept": 12.0,
                "mass_designs_evaluated": 9.0, "mass_rejected": 3.0, "mass_math_fitness": 0.4 + 0.1 * idx,
                "mass_math_accuracy": 0.4 + 0.1 * idx, "mass_math_single_agent_fitness": 0.25 + 0.05 * idx,
                "mass_math_champion_is_single_agent": 0.0, "mass_model_proposals_accepted": 0.0})
        else:
            write_json(mass_dir / "search.json", {"enabled": False})
            write_json(root / f"metrics/{c}/mass_search.json", {"mass_enabled": 0})
    return root


def _check_pngs(result: dict) -> None:
    assert set(result["figures"]) == set(FIGURES)
    for name, path in result["figures"].items():
        assert path.is_file() and path.stat().st_size > 5_000, name
        assert path.read_bytes()[:8] == PNG_MAGIC, name


def test_report_renders_every_plot_from_campaign_outputs(tmp_path):
    root = build_fake_campaign(tmp_path / "campaign")
    result = build_report(root, track=False)
    out = root / "reports"
    _check_pngs(result)
    md = result["report"].read_text()
    assert result["report"] == out / "report.md"
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(links) == sorted(fname for fname, _ in FIGURES.values())
    assert all((out / link).is_file() for link in links)
    # per-cycle table: one row per cycle, with the benchmark and training columns
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert rows[0].startswith("| cycle | heldout pass@1 | gsm8k pass@1 | gsm8k pass@4 | pool |")
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["base", "c1", "c2"]
    assert "| c2 | 0.450 | 0.113 | 0.225 |" in md
    assert "MASS math fitness" in rows[0]
    assert "## Missing data" not in md  # everything was there

    # dvc plots series: JSON lists with the documented fields
    series = {name: json.loads((out / f"{name}.json").read_text()) for name in SERIES}
    assert [r["cycle"] for r in series["benchmarks"]] == ["base", "c1", "c2"]
    assert [r["step"] for r in series["benchmarks"]] == [0, 1, 2]
    assert series["benchmarks"][2]["heldout_accuracy"] == 0.45 and series["benchmarks"][0]["gsm8k_pass_at_4"] == 0.1
    pool = {r["cycle"]: r for r in series["pool"]}
    assert pool["base"]["pool_size"] == 50 and pool["base"]["mean_pass_rate"] is None and pool["base"]["level_1"] == 10
    assert pool["c2"]["pool_size"] == 50 + 10 + 14 and pool["c2"]["challenger_questions"] == 24
    assert all(f"level_{lv}" in r for r in series["pool"] for lv in range(1, 7))
    assert abs(sum(r["fraction"] for r in series["pool_levels"] if r["cycle"] == "c1") - 1.0) < 1e-6
    assert {r["cycle"] for r in series["pool_pass_rates"]} == {"c1", "c2"}
    assert [r["critic_question_pass_rate"] for r in series["critic"]] == [0.4, 0.5]
    assert [r["cycle"] for r in series["rewards"]] == ["c1", "c2"] and series["rewards"][1]["reward_solver"] == 0.6
    mass = {r["cycle"]: r for r in series["mass"]}
    assert mass["c2"]["math_champion_fitness"] == 0.6 and mass["c2"]["math_single_agent_fitness"] == 0.35
    assert len(series["mass_history"]) == 6


def test_report_with_missing_data_says_so_and_does_not_crash(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    _write_params(root, campaign="empty-campaign")
    result = build_report(root, out_dir=tmp_path / "out", track=False)
    _check_pngs(result)
    md = result["report"].read_text()
    assert "## Missing data" in md and "pool.jsonl: missing" in md
    assert all(json.loads(p.read_text()) == [] for p in result["series"].values())
    assert "| base | - |" in md


def test_report_mass_disabled_and_partial_campaign(tmp_path):
    """MASS off and cycle c2 not run yet: the MASS plot says MASS is disabled, c2 shows as missing."""
    import shutil

    root = build_fake_campaign(tmp_path / "campaign", mass_enabled=False)
    shutil.rmtree(root / "metrics" / "c2")
    shutil.rmtree(root / "data" / "cycles" / "c2")
    result = build_report(root, track=False)
    _check_pngs(result)
    series = json.loads((root / "reports" / "mass.json").read_text())
    assert series == []
    md = result["report"].read_text()
    assert "metrics/c2: no metrics files" in md
    assert [r["cycle"] for r in json.loads((root / "reports" / "benchmarks.json").read_text())] == ["base", "c1"]


def test_report_command_logs_to_mlflow_idempotently(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from selfevolve.cli import app
    from selfevolve.tracking import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = build_fake_campaign(tmp_path / "campaign")
    runner = CliRunner()
    for _ in range(2):
        res = runner.invoke(app, ["report", "--root", str(root)])
        assert res.exit_code == 0, res.output
    assert "report.md" in res.stdout and "benchmarks.png" in res.stdout
    client = MlflowClient(tracking_uri=tracking_uri(root))
    exp = client.get_experiment_by_name("report-test")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`selfevolve.stage` = 'report'")
    assert len(runs) == 1  # replaced, not duplicated
    run = runs[0]
    history = client.get_metric_history(run.info.run_id, "heldout_accuracy")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.2), (1, 0.35), (2, 0.45)]
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/report.md", "report/benchmarks.png", "report/mass_fitness.png", "report/benchmarks.json"} <= arts


def test_report_command_fails_cleanly_without_params(tmp_path):
    from typer.testing import CliRunner

    from selfevolve.cli import app

    res = CliRunner().invoke(app, ["report", "--root", str(tmp_path), "--no-track"])
    assert res.exit_code == 2
    assert "params.yaml" in res.output and "not found" in res.output


def test_report_table_has_paired_significance_and_mass_heldout_columns(tmp_path):
    """The held-out p-value is the exact McNemar test on the per-item outcomes of eval/heldout.jsonl
    (paired by question id); the MASS held-out columns come from the evaluate metrics."""
    from selfevolve.stats import mcnemar_exact

    root = build_fake_campaign(tmp_path / "campaign")
    outcomes = {"base": [1] * 30 + [0] * 70, "c1": [1] * 30 + [0] * 70, "c2": [1] * 28 + [0] * 2 + [1] * 14 + [0] * 56}
    for c, xs in outcomes.items():
        rows = [{"id": f"h{i}", "correct": [x]} for i, x in enumerate(xs)]
        write_jsonl(root / f"data/cycles/{c}/eval/heldout.jsonl", rows[::-1])  # order must not matter
    m = json.loads((root / "metrics/c2/evaluate.json").read_text())
    write_json(root / "metrics/c2/evaluate.json", {**m, "mass_champion_accuracy": 0.61, "mass_single_agent_accuracy": 0.52,
                                                    "mass_champion_accuracy_per_1k_tokens": 9.5, "mass_single_agent_accuracy_per_1k_tokens": 14.0})
    md = build_report(root, track=False)["report"].read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| cycle"))
    assert "held-out p vs base" in head and "MASS champion held-out" in head and "single acc/1k tok" in head
    p2 = mcnemar_exact(outcomes["base"], outcomes["c2"])[0]
    assert p2 < 0.05
    c2 = next(ln for ln in md.splitlines() if ln.startswith("| c2 |")).split("|")
    c1 = next(ln for ln in md.splitlines() if ln.startswith("| c1 |")).split("|")
    col = [x.strip() for x in head.split("|")].index("held-out p vs base")
    assert c2[col].strip() == f"{p2:.3f}" and c1[col].strip() == "1.000"
    cells = [x.strip() for x in c2]
    assert {"0.610", "0.520", "9.500", "14.000"} <= set(cells)


def test_report_shows_the_frontier_and_seed_forms_per_cycle(tmp_path):
    """With held-out splits, the frontier figure and the per-form heat map have data (not the
    missing-data note), the series holds one row per cycle and form, and the table carries the
    frontier column."""
    from selfevolve.questions import arith

    root = build_fake_campaign(tmp_path / "campaign", frontier=True)
    write_jsonl(root / "data/cycles/base/heldout.jsonl", arith.generate(4, seed=1, forms=["4+3"], split="frontier")
                + arith.generate(4, seed=2, forms=["2+2"], split="seed"))
    result = build_report(root, track=False)
    forms = json.loads((root / "reports" / "forms.json").read_text())
    assert {(r["cycle"], r["form"]) for r in forms} == {(c, f) for c in ("base", *CYCLES) for f in ("4+3", "2+2")}
    assert all(r["frontier"] == (r["form"] == "4+3") for r in forms)
    bench = json.loads((root / "reports" / "benchmarks.json").read_text())
    assert [r["heldout_frontier_accuracy"] for r in bench] == [0.1, 0.175, 0.225]
    md = result["report"].read_text()
    assert "heldout_frontier pass@1" in md and "Held-out accuracy: frontier" in md



def _with_outcomes(root: Path) -> Path:
    """The fake campaign (with held-out splits) plus what decides the conclusions: p-values against
    base, self-labels, and c1 keeping its SFT model while c2 keeps the RL checkpoint and discards SFT."""
    for c, ps in {"c1": (2.72109334e-19, 0.23), "c2": (0.31, 1.0)}.items():
        m = json.loads((root / f"metrics/{c}/evaluate.json").read_text())
        write_json(root / f"metrics/{c}/evaluate.json", {**m, "heldout_frontier_p_vs_base": ps[0], "heldout_seed_p_vs_base": ps[1]})
    write_json(root / "metrics/c1/datasets.json", {"self_labels": 83})
    write_json(root / "metrics/c1/train_sft.json", {"sft_kept": 1})
    write_json(root / "metrics/c2/train_sft.json", {"sft_kept": 0})
    return root


def test_report_concludes_each_cycle_from_its_metrics(tmp_path):
    root = _with_outcomes(build_fake_campaign(tmp_path / "campaign", frontier=True))
    md = build_report(root, track=False)["report"].read_text()
    assert "## Conclusions per cycle" in md
    assert ("- **c1**: Frontier accuracy improved: 0.175 against the base model's 0.100 (p = 2.7e-19); seed-form accuracy "
            "0.950 against the base model's 0.950: no significant change (p = 0.23). It added 10 new pool questions and "
            "83 self-labels for the Solver. Kept: SFT of the RL checkpoint (SFT kept).") in md
    assert ("- **c2**: Frontier accuracy 0.225 against the base model's 0.100: no significant change (p = 0.31); "
            "seed-form accuracy 0.950 against the base model's 0.950: no significant change (p = 1). It added 14 new "
            "pool questions. Kept: RL checkpoint (SFT discarded or not trained).") in md


def test_conclusion_of_a_drop_and_of_a_cycle_that_kept_its_start():
    from selfevolve.reporting.conclusions import cycle_conclusion

    text = cycle_conclusion("c2", {"frontier accuracy": 0.2, "frontier p vs base": 0.001, "rl kept": 0.0, "sft kept": 0.0},
                            {"frontier accuracy": 0.3}, "c1")
    assert text == ("Frontier accuracy dropped: 0.200 against the base model's 0.300 (p = 0.001). "
                    "Kept: its start c1 unchanged (training kept no checkpoint).")


def test_conclusion_says_what_a_cycle_did_against_the_one_it_started_from():
    from selfevolve.reporting.conclusions import cycle_conclusion

    m = {"frontier accuracy": 0.93, "frontier p vs base": 1e-16, "rl kept": 1.0, "sft kept": 1.0}
    text = cycle_conclusion("c2", m, {"frontier accuracy": 0.76}, "c1", (0.028, 0.00087))
    assert ("(p = 1e-16). Against c1, the model it started from, the unsupervised rungs together rose (+0.028, p = 0.00087). "
            "Kept:") in text
    assert "no significant change (-0.004, p = 0.8)" in cycle_conclusion("c3", m, {}, "c2", (-0.004, 0.8))
    assert "started from" not in cycle_conclusion("c1", m, {}, "base", (0.05, 1e-9))  # the split sentences say it
    assert "started from" not in cycle_conclusion("c2", m, {}, "c1", None)  # no rungs measured


def test_conclusion_names_the_ladder_holes():
    """A form failed below a solved harder one is named with both accuracies (seed 0's c2 of
    docs/measurements.md, "December 7 (night)"); the edge of the ladder is not a hole."""
    from selfevolve.reporting.conclusions import cycle_conclusion

    m = {"frontier accuracy": 0.96, "rl kept": 1.0, "sft kept": 1.0}
    text = cycle_conclusion("c2", m, {}, "c1", forms={"7+4": 0.0, "8+4": 0.71, "8+8": 0.0, "3+3": 1.0})
    assert "Holes in the ladder, forms it fails while it solves a harder one: 7+4 (0.00; 8+4 0.71)." in text
    assert "Holes" not in cycle_conclusion("c2", m, {}, "c1", forms={"7+4": 0.0, "8+4": 0.4})


def _drawn(plot, root: Path):
    """The axes of one report figure drawn on an Agg canvas, and that canvas's renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from selfevolve.reporting.collect import collect_campaign
    from selfevolve.reporting.figures import _new_figure
    from selfevolve.reporting.series import compute_series

    data = collect_campaign(root)
    fig, (ax,) = _new_figure()
    canvas = FigureCanvasAgg(fig)
    plot(ax, data, compute_series(data))
    canvas.draw()
    return ax, canvas.get_renderer()


def test_figures_value_labels_do_not_overlap_and_legends_leave_the_points_free(tmp_path):
    """Issue 26: labels of equal values sat on each other (critic pass rates, rewards) and a legend
    covered a point. Here the two critic rates are equal in c2 and the frontier labels carry their
    p-values on a second line, next to the seed forms' labels."""
    from selfevolve.reporting import figures

    root = _with_outcomes(build_fake_campaign(tmp_path / "campaign", frontier=True))
    write_json(root / "metrics/c2/critic_plans.json", {"critic_plan_pass_rate": 0.5})  # = c2's question pass rate
    for plot in (figures._plot_critic, figures._plot_rewards, figures._plot_frontier):
        ax, renderer = _drawn(plot, root)
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert len(boxes) >= 3, plot.__name__  # equal values share one label
        overlaps = [(a.get_text(), b.get_text()) for i, (a, ba) in enumerate(zip(ax.texts, boxes))
                    for b, bb in list(zip(ax.texts, boxes))[i + 1:] if ba.overlaps(bb)]
        assert not overlaps, (plot.__name__, overlaps)
        (legend,) = [lg.get_window_extent(renderer) for lg in ax.figure.legends]
        assert not legend.overlaps(ax.get_window_extent(renderer)), plot.__name__
        assert ax.figure.bbox.x0 - 1 <= legend.x0 and legend.x1 <= ax.figure.bbox.x1 + 1 and legend.y0 >= -1, plot.__name__
    texts = [t.get_text() for t in ax.texts]  # the frontier figure
    assert "0.17\np=2.7e-19" in texts and "0.95\np=0.23" in texts and "0.10" in texts


def test_benchmarks_figure_leaves_the_held_out_set_to_the_frontier_figure(tmp_path):
    """Issue 26: benchmarks.png repeated frontier.png's held-out lines. It now draws only the other
    benchmarks, and says so where there are none."""
    from selfevolve.reporting import figures

    root = build_fake_campaign(tmp_path / "campaign")
    ax, _ = _drawn(figures._plot_benchmarks, root)
    names = [line.get_label() for line in ax.get_lines()]
    assert names and all(n.startswith("gsm8k") for n in names), names
    for c in ("base", "c1", "c2"):  # a campaign with the held-out set only
        ev = json.loads((root / f"metrics/{c}/evaluate.json").read_text())
        write_json(root / f"metrics/{c}/evaluate.json", {k: v for k, v in ev.items() if not k.startswith("gsm8k")})
    ax, _ = _drawn(figures._plot_benchmarks, root)
    assert not ax.get_lines() and "frontier.png" in ax.texts[0].get_text()


def test_mass_figure_keeps_its_labels_inside_and_shows_a_single_agent_champion(tmp_path):
    """Issue 26: the champion's value label was clipped at the top of an auto-scaled axis, and where
    the champion was the single agent (same fitness) the reference line was hidden under it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from selfevolve.reporting import figures
    from selfevolve.reporting.collect import collect_campaign
    from selfevolve.reporting.series import compute_series

    root = build_fake_campaign(tmp_path / "campaign")
    for idx, c in ((1, "c1"), (2, "c2")):  # the champion as fit as the single agent (0.25 + 0.05 x idx)
        write_json(root / f"data/cycles/{c}/mass/search.json", _search_json(idx, [0.25 + 0.05 * idx]))
    data = collect_campaign(root)
    fig, axes = figures._new_figure(ncols=2, width=6.5)
    canvas = FigureCanvasAgg(fig)
    figures._plot_mass(axes, data, compute_series(data))
    canvas.draw()
    renderer, ax = canvas.get_renderer(), axes[0]
    assert ax.get_ylim() == figures.FRACTION
    inside = ax.get_window_extent(renderer)
    assert ax.texts and all(inside.y0 <= t.get_window_extent(renderer).y0 and t.get_window_extent(renderer).y1 <= inside.y1
                            for t in ax.texts)
    champion, single = ax.get_lines()
    assert list(champion.get_ydata()) == list(single.get_ydata())
    assert single.get_zorder() > champion.get_zorder() and single.get_markerfacecolor() == "none"


def test_conclusion_says_what_the_mass_champion_did_against_one_pass():
    from selfevolve.reporting.conclusions import cycle_conclusion

    m = {"frontier accuracy": 0.9, "rl kept": 1.0}
    mass = {"mass_champion_is_single_agent": 0.0, "mass_champion_accuracy_frontier": 0.9, "mass_single_agent_accuracy_frontier": 0.72,
            "mass_p_frontier": 2e-6, "mass_champion_accuracy_beyond": 0.64, "mass_single_agent_accuracy_beyond": 0.19,
            "mass_p_beyond": 1e-12}
    text = cycle_conclusion("c1", m, {}, "base", None, mass)
    assert ("Its MASS champion, a multi-agent design, against one pass on the same held-out questions: "
            "frontier 0.900 against 0.720 (p = 2e-06); rungs beyond 0.640 against 0.190 (p = 1e-12).") in text
    assert "single agent" not in text
    assert " Its MASS champion was the single agent. Kept:" in cycle_conclusion("c1", m, {}, "base", None, {"mass_champion_is_single_agent": 1.0})
    assert "MASS" not in cycle_conclusion("c1", m, {}, "base", None, {})
