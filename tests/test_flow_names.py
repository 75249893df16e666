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
