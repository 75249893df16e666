"""Prefect flow runs are named by campaign and cycles, not at random."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_campaign_run_name_names_the_campaign_and_its_last_cycle(tmp_path, monkeypatch):
    import prefect.runtime.flow_run

    import flows.campaign
    import flows.cycle

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    names = list(params["cycles"])
    monkeypatch.setitem(prefect.runtime.flow_run.FIELDS, "parameters", lambda: {"root": str(tmp_path), "cycles": 1})
    assert flows.campaign.run_name() == f"{params['campaign']}: base..{names[0]}"
    monkeypatch.setitem(prefect.runtime.flow_run.FIELDS, "parameters", lambda: {"root": str(tmp_path), "cycles": None})
    assert flows.campaign.run_name() == f"{params['campaign']}: base..{names[-1]}"
    assert flows.cycle.cycle.flow_run_name == "cycle {name}"


def test_cycle_runs_together_are_the_campaigns_stage_runs():
    """The campaign's subflows, one per cycle, run exactly the campaign's stages, in its order."""
    from flows.cycle import cycle_runs
    from selfevolve.config import load_params
    from selfevolve.stages.placement import stage_runs

    params = load_params(ROOT / "params.yaml")
    names = params.cycle_names()
    per_cycle = [r.id for name in ["base", *names] for r in cycle_runs(params, name)]
    assert per_cycle == [r.id for r in stage_runs(params, names)]
    assert {r.cycle for r in cycle_runs(params, "base")} == {"base"} and "seeds" in [r.id for r in cycle_runs(params, "base")]


def test_campaign_runs_a_subflow_per_cycle_with_stage_tasks_cached_or_completed(tmp_path, monkeypatch):
    """On a temporary Prefect server: the campaign flow run holds a subflow run per cycle, named
    'cycle <name>'; each stage is a task run named by its stage id, ending Cached when DVC did not
    run its command and Completed when it did. Only the stage's ``dvc repro`` and the campaign's
    report and summary are stood in for."""
    import asyncio

    from prefect import get_client, task
    from prefect.testing.utilities import prefect_test_harness

    import flows.campaign
    import selfevolve.reporting.summary
    import tasks.dispatch
    import tasks.campaign
    import tasks.repro
    from selfevolve.config import load_params
    from selfevolve.stages.placement import stage_runs

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    params = load_params(tmp_path / "params.yaml")
    first = params.cycle_names()[0]
    monkeypatch.setattr(tasks.repro, "reproduce", lambda stage_id, root: stage_id != "seeds")
    monkeypatch.setattr(tasks.dispatch, "check_dvc_yaml", lambda root, params: None)
    monkeypatch.setattr(tasks.campaign, "report", task(name="report", task_run_name="report")(lambda root: "report.md"))
    monkeypatch.setattr(selfevolve.reporting.summary, "campaign_summary", lambda root, names: {"table": "", "rows": []})
    monkeypatch.setattr(flows.campaign, "publish_summary", lambda *a: None)

    want = [r.id for r in stage_runs(params, [first])]

    async def runs():
        """Flow and task runs once every stage's task run is recorded in its final state: the
        server records task runs from events, asynchronously (slower on a loaded machine)."""
        async with get_client() as client:
            for _ in range(120):
                flow_runs, task_runs = await client.read_flow_runs(), await client.read_task_runs()
                final = {r.name for r in task_runs if r.state and r.state.is_final()}
                if set(want) <= final:
                    break
                await asyncio.sleep(0.5)
            return flow_runs, task_runs

    with prefect_test_harness(server_startup_timeout=90):
        flows.campaign.campaign(cycles=1, root=str(tmp_path), commit_lock=False)
        flow_runs, task_runs = asyncio.run(runs())
    by_name = {r.name: r for r in flow_runs}
    assert set(by_name) == {f"{params.campaign}: base..{first}", "cycle base", f"cycle {first}"}
    assert by_name[f"{params.campaign}: base..{first}"].parent_task_run_id is None
    assert all(by_name[f"cycle {c}"].parent_task_run_id is not None for c in ("base", first))
    stage_tasks = {r.name: r.state.name for r in task_runs if r.flow_run_id in (by_name["cycle base"].id, by_name[f"cycle {first}"].id)}
    assert sorted(stage_tasks) == sorted(want)
    assert stage_tasks["seeds"] == "Cached" and {s for n, s in stage_tasks.items() if n != "seeds"} == {"Completed"}
