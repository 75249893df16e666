"""End to end: a 2-cycle campaign on the tiny model in a fresh copy of the project, submitted as
a real Prefect deployment run (Prefect server + process worker started here, on 127.0.0.1) with
tracking on a real MLflow server; then DVC, MLflow and resilience checks on what it left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from helpers import BIN, dvc, make_project
from selfevolve import tracking
from selfevolve.orchestration import services
from selfevolve.stages.registry import BASE_STAGES, CYCLE_STAGES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("campaign"))
    with services.Stack() as stack:
        mlflow_url = services.start_mlflow(stack, project, store=project / "mlflow-server")
        api = services.start_prefect(stack, project, home=project / ".prefect")
        services.deploy(stack, project)
        services.start_worker(stack, project, "cpu", extra_env={"MLFLOW_TRACKING_URI": mlflow_url})
        env = services.quiet_env({**stack.env, "SELFEVOLVE_ROOT": str(project)})
        t0 = time.time()
        r = subprocess.run([str(BIN / "prefect"), "deployment", "run", "campaign/campaign", "-p", "cycles=2", "--watch",
                            "--watch-timeout", "1500"], cwd=project, env=env, capture_output=True, text=True, timeout=1600)
        seconds = time.time() - t0
        worker_log = (project / ".services" / "prefect-worker-cpu.log").read_text(errors="replace")
        assert r.returncode == 0 and "Completed" in r.stdout, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{worker_log[-6000:]}"
        yield {"root": project, "mlflow": mlflow_url, "api": api, "seconds": seconds, "env": env}


def test_every_stage_output_exists(campaign):
    root = campaign["root"]
    for c in ("c1", "c2"):
        for f in ("challenge.jsonl", "critic_questions.jsonl", "solve_set.jsonl", "plans.jsonl", "critic_plans.jsonl", "attempts.jsonl",
                  "verdicts.jsonl", "rollouts.jsonl", "pool.jsonl", "rl_dataset.jsonl", "self_labels.jsonl", "earlier_labels.jsonl",
                  "earlier_distilled.jsonl", "sft_dataset.jsonl", "eval/heldout.jsonl", "mass/champions.json",
                  "mass/distill.jsonl", "mass/distill.json"):
            assert (root / "data" / "cycles" / c / f).exists(), (c, f)
        assert (root / "models" / c / "config.json").exists() and (root / "models" / f"{c}-rl" / "rl.json").exists()
        m = json.loads((root / "metrics" / c / "evaluate.json").read_text())
        assert 0.0 <= m["heldout_accuracy"] <= 1.0 and m["heldout_n"] == 16
        # held-out split in two (seed forms: retention; frontier: never supervised), tested against the base model
        assert m["heldout_seed_n"] == m["heldout_frontier_n"] == 8 and 0.0 <= m["heldout_frontier_p_vs_base"] <= 1.0
        # the MASS benchmark of the cycle: its champion vs the single agent on the same held-out questions
        assert m["mass_heldout_n"] == 6 and 0.0 <= m["mass_champion_accuracy"] <= 1.0 and "mass_single_agent_accuracy" in m
        mass_rows = json.loads((root / "data" / "cycles" / c / "eval" / "mass.json").read_text())
        assert set(mass_rows["math"]) >= {"champion", "single_agent", "ratios"}
    pool1 = (root / "data/cycles/c1/pool.jsonl").read_text().count("\n")
    pool2 = (root / "data/cycles/c2/pool.jsonl").read_text().count("\n")
    assert pool2 >= pool1 >= 40


def test_cycle_two_started_from_cycle_one(campaign):
    lock = yaml.safe_load((campaign["root"] / "dvc.lock").read_text())["stages"]
    deps = {d["path"] for d in lock["challenge@c2"]["deps"]}
    assert "models/c1" in deps and "data/cycles/c1/pool.jsonl" in deps
    # c2 is tested against the model it started from: c1's held-out rows (a dependency of its evaluate stage)
    assert "data/cycles/c1/eval" in {d["path"] for d in lock["evaluate@c2"]["deps"]}
    from selfevolve.stats import mcnemar_exact

    def frontier(c):
        rows = [json.loads(x) for x in (campaign["root"] / f"data/cycles/{c}/eval/heldout.jsonl").read_text().splitlines() if x.strip()]
        return {r["id"]: int(r["correct"][0]) for r in rows if r["categories"]["split"] == "frontier"}

    c1, c2 = frontier("c1"), frontier("c2")
    m = json.loads((campaign["root"] / "metrics/c2/evaluate.json").read_text())
    assert m["heldout_frontier_p_vs_prev"] == mcnemar_exact([c1[i] for i in c2], list(c2.values()))[0]


def test_dvc_repro_after_prefect_has_nothing_to_do(campaign):
    r = dvc(campaign["root"], "repro")
    assert "didn't change" in r.stdout or "up to date" in r.stdout
    assert "Running stage" not in r.stdout, r.stdout


def test_param_change_invalidates_only_dependents(campaign):
    root = campaign["root"]
    original = (root / "params.yaml").read_text()
    try:
        data = yaml.safe_load(original)
        data["sage"]["alpha"] = 0.6
        (root / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        status = dvc(root, "status", "--json").stdout
        changed = set(json.loads(status))
        assert "critic_questions@c1" in changed and "challenge@c1" not in changed and "bootstrap" not in changed
    finally:
        (root / "params.yaml").write_text(original)


def test_mlflow_has_one_parent_per_cycle_with_nested_stages(campaign):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(campaign["mlflow"])
    exp = client.get_experiment_by_name("e2e")
    runs = client.search_runs([exp.experiment_id], max_results=500)
    parents = [r for r in runs if r.data.tags.get("selfevolve.kind") == "cycle"]
    # one parent per cycle, plus the campaign-level run that holds the report
    assert sorted(r.data.tags["selfevolve.cycle"] for r in parents) == ["base", "c1", "c2", "campaign"]
    by_parent = {p.info.run_id: p for p in parents}
    stages = [r for r in runs if r.data.tags.get("selfevolve.kind") == "stage" and r.data.tags["selfevolve.cycle"] != "campaign"]
    assert all(r.data.tags["mlflow.parentRunId"] in by_parent for r in stages)
    keys = [(r.data.tags["selfevolve.cycle"], r.data.tags["selfevolve.stage"]) for r in stages]
    assert len(keys) == len(set(keys)) == len(BASE_STAGES) + 2 * len(CYCLE_STAGES)  # one run per stage and cycle
    c1 = next(p for p in parents if p.data.tags["selfevolve.cycle"] == "c1")
    for metric in ("pool_size", "critic_question_pass_rate", "solver_accuracy", "reward_solver", "heldout_accuracy",
                   "heldout_frontier_accuracy", "heldout_seed_accuracy"):
        assert metric in c1.data.metrics, metric
    # the loss per step of every cycle that had rows to train on (the tiny model has some in one cycle
    # or another: which one follows the CPU's kernels)
    trained = [r for r in stages if r.data.tags["selfevolve.stage"] == "train_rl" and r.data.metrics.get("rl_trained")]
    assert trained and all(len(client.get_metric_history(r.info.run_id, "loss")) == 3 for r in trained)
    # each cycle's kept model is a registered version with its cycle's alias, the champion among them
    versions = client.search_model_versions("name = 'e2e'")
    assert set(client.get_registered_model("e2e").aliases) == {"base", "c1", "c2", "champion"} and len(versions) == 3
    assert {r.data.tags["selfevolve.cycle"] for r in parents if "headline/frontier accuracy" in r.data.metrics} >= {"base", "c1", "c2"}
    eval_run = next(r for r in stages if r.data.tags["selfevolve.stage"] == "evaluate" and r.data.tags["selfevolve.cycle"] == "c1")
    assert "outputs/eval/heldout.jsonl" in {a.path for a in client.list_artifacts(eval_run.info.run_id, "outputs/eval")}
    mass_run = next(r for r in stages if r.data.tags["selfevolve.stage"] == "mass_search" and r.data.tags["selfevolve.cycle"] == "c1")
    assert "outputs/mass/champions.json" in {a.path for a in client.list_artifacts(mass_run.info.run_id, "outputs/mass")}
    # traces: a bounded sample of questions through the roles, linked to the rewards run of each cycle
    for cycle in ("c1", "c2"):
        run = next(r for r in stages if r.data.tags["selfevolve.stage"] == "rewards" and r.data.tags["selfevolve.cycle"] == cycle)
        traces = client.search_traces(locations=[exp.experiment_id], run_id=run.info.run_id)
        assert 1 <= len(traces) <= tracking.TRACE_ITEMS
        roles = {s.name.split(" (")[0] for t in traces for s in t.data.spans}
        assert {"planner", "solver", "verifier"} <= roles, roles  # the Challenger's spans: test_sage_stages
    trajectories = (campaign["root"] / "data/cycles/c1/mass/trajectories.jsonl").read_text().splitlines()
    mass_traces = client.search_traces(locations=[exp.experiment_id], run_id=mass_run.info.run_id)
    assert len(mass_traces) == min(len(trajectories), tracking.TRACE_ITEMS)


def test_kill_mid_stage_then_rerun_completes_without_duplicates(campaign):
    """kill -9 in the middle of a stage, then run again (``dvc repro`` + the report step, as the
    campaign flow does): it completes, earlier outputs are intact, and MLflow holds one finished
    run per stage (DVC may restore the killed stage's outputs from its cache instead of rerunning)."""
    root, env = campaign["root"], dict(campaign["env"])
    env["MLFLOW_TRACKING_URI"] = campaign["mlflow"]
    earlier = (root / "data/cycles/c1/pool.jsonl").read_bytes()
    attempts = root / "data/cycles/c2/attempts.jsonl"
    before = attempts.read_bytes()
    proc = subprocess.Popen([str(BIN / "dvc"), "repro", "-f", "-s", "solve@c2"], cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(campaign["mlflow"])
    exp = client.get_experiment_by_name("e2e")
    flt = "tags.`selfevolve.stage` = 'solve' and tags.`selfevolve.cycle` = 'c2'"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # kill once the stage has opened its run
        if any(r.info.status == "RUNNING" for r in client.search_runs([exp.experiment_id], flt)):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the stage finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    r = dvc(root, "repro", env=env)
    assert "solve@c2" in r.stdout
    assert attempts.read_bytes() == before  # same seed, same model: the same attempts
    assert (root / "data/cycles/c1/pool.jsonl").read_bytes() == earlier
    assert "Running stage" not in dvc(root, "repro", env=env).stdout
    rep = subprocess.run([str(BIN / "selfevolve"), "report", "--root", str(root)], cwd=root, env=env, capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr[-3000:]
    runs = client.search_runs([exp.experiment_id], flt)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", [(r.info.run_id, r.info.status) for r in runs]


def test_the_uis_show_the_campaign(campaign, tmp_path):
    """MLflow and Prefect as a user meets them, in a real headless Chromium: the cycle runs (model
    training view, not the GenAI overview), the cycles side by side with their headline metrics,
    the report's charts, a question's trace, the registered model's versions with their aliases, and
    the campaign's flow run and its summary artifact in Prefect. Screenshots go to
    $SELFEVOLVE_SCREENSHOTS when set (`make screenshots` uses the default campaign instead)."""
    from selfevolve.reporting.screenshots import BrowserUnavailable, browser_paths, campaign_pages, capture

    try:
        browser_paths()
    except BrowserUnavailable as exc:
        pytest.skip(str(exc))
    found = services.campaign_records(campaign["api"], "e2e")
    assert found["flow_run"] and found["summary"], f"the campaign's flow run or summary artifact is not in the Prefect server: {found}"
    out = Path(os.environ.get("SELFEVOLVE_SCREENSHOTS") or tmp_path)
    pages = capture(campaign_pages(campaign["mlflow"], "e2e", campaign["api"].removesuffix("/api"), found["flow_run"], found["summary"]), out)
    assert {p.name for p in pages} == {"ui_mlflow_cycles", "ui_mlflow_compare", "ui_mlflow_report", "ui_mlflow_trace",
                                       "ui_mlflow_model", "ui_prefect_flow_run", "ui_prefect_summary"}
    for p in pages:
        assert all(p.found.values()), (p.name, p.found)
        assert (out / f"{p.name}.png").stat().st_size > 20_000, p.name


def test_editing_code_reruns_exactly_the_stages_that_use_it(campaign):
    """dvc.yaml's code dependencies come from each stage's imports: a change to the Solver's parser
    makes every stage that parses role output stale (``datasets`` too: a self-label must be in the
    Solver's format), and none of the stages that only grade or reward."""
    root = campaign["root"]
    parser = root / "selfevolve" / "roles" / "parsers.py"
    original = parser.read_text()
    try:
        parser.write_text(original + "\n# edited\n")
        changed = set(json.loads(dvc(root, "status", "--json").stdout))
        assert {"challenge@c1", "critic_questions@c1", "plan@c1", "solve@c1", "datasets@c1", "evaluate@c1", "evaluate_base"} <= changed
        assert not {"seeds", "verify@c1", "rewards@c1"} & changed, changed
    finally:
        parser.write_text(original)
    assert json.loads(dvc(root, "status", "--json").stdout) == {}


def test_a_second_clone_pulls_the_campaign_and_runs_the_next_cycle(campaign, tmp_path):
    """The campaign committed dvc.lock; `dvc push --run-cache` to a remote, then a second clone
    pulls everything, `dvc status` is clean there, and it runs cycle c3 from the pulled c2."""
    root, env = campaign["root"], dict(campaign["env"])
    log = subprocess.run(["git", "log", "--format=%s", "--", "dvc.lock"], cwd=root, capture_output=True, text=True).stdout
    assert log.startswith("campaign: dvc.lock after base, c1, c2"), log
    remote = tmp_path / "remote"
    dvc(root, "remote", "modify", "--local", "local", "url", str(remote))
    dvc(root, "push", "--run-cache")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    dvc(clone, "config", "--local", "core.site_cache_dir", str(clone / ".dvc" / "site-cache"))
    dvc(clone, "remote", "modify", "--local", "local", "url", str(remote))
    dvc(clone, "pull", "--run-cache")
    assert json.loads(dvc(clone, "status", "--json").stdout) == {}
    assert (clone / "models" / "c2" / "config.json").is_file()
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["cycles"]["c3"] = {"init": "c2"}
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env.pop("MLFLOW_TRACKING_URI", None)
    r = dvc(clone, "repro", "evaluate@c3", env=env)
    assert "Running stage 'challenge@c3'" in r.stdout and "Running stage 'challenge@c2'" not in r.stdout
    m = json.loads((clone / "metrics" / "c3" / "evaluate.json").read_text())
    assert m["heldout_n"] == 16 and json.loads(dvc(clone, "status", "--json").stdout) == {}
