"""``selfevolve summary``: the headline metrics per cycle, fitted to the terminal, p-values as p-values."""

from __future__ import annotations

import json

from selfevolve import headline
from selfevolve.reporting.summary import campaign_summary


def _metrics(root, cycle, stage, **values):
    d = root / "metrics" / cycle
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stage}.json").write_text(json.dumps(values))


def test_summary_fits_100_columns_and_prints_p_values(tmp_path, monkeypatch):
    _metrics(tmp_path, "base", "evaluate", heldout_frontier_accuracy=0.308, heldout_seed_accuracy=0.972, heldout_reach_50=7)
    for c, p in (("c1", 2.72109334e-19), ("c2", 0.2301)):
        _metrics(tmp_path, c, "evaluate", heldout_frontier_accuracy=0.494, heldout_frontier_p_vs_base=p, heldout_seed_accuracy=0.982,
                 heldout_seed_p_vs_base=0.23, heldout_beyond_accuracy=0.05, heldout_rungs_p_vs_prev=p, heldout_reach_50=8,
                 heldout_reach_90=7)
        _metrics(tmp_path, c, "datasets", self_labels=83)
        _metrics(tmp_path, c, "rewards", pool_growth=1118)
        _metrics(tmp_path, c, "train_rl", best_step=0)
        _metrics(tmp_path, c, "train_sft", sft_kept=1)
    monkeypatch.setenv("COLUMNS", "100")  # what rich reads for the terminal's width
    s = campaign_summary(tmp_path, ["c1", "c2"])
    lines = s["table"].splitlines()
    assert max(len(line) for line in lines) <= 100 and "…" not in s["table"]
    assert "2.7e-19" in s["table"] and "0.23" in s["table"] and "0.000" not in s["table"]
    c1 = next(line for line in lines if line.lstrip().startswith("c1"))
    assert c1.split() == ["c1", "0.494", "2.7e-19", "0.982", "0.23", "0.050", "2.7e-19", "8", "7", "83", "1118", "no",
                          "yes"]
    assert s["rows"][1]["frontier p vs base"] == 2.72109334e-19 and "pool growth" not in s["rows"][0]
    monkeypatch.setenv("COLUMNS", "80")  # a narrow terminal: the table is drawn at its minimum width, nothing cut
    assert "…" not in campaign_summary(tmp_path, ["c1", "c2"])["table"]
    monkeypatch.setenv("COLUMNS", "160")
    assert max(len(line) for line in campaign_summary(tmp_path, ["c1", "c2"])["table"].splitlines()) <= 160


def test_p_values_never_print_as_zero():
    assert headline.fmt(2.72109334e-19, "p") == "2.7e-19" and headline.fmt(0.0004, "p") == "0.0004"
    assert headline.fmt(0.05, "p") == "0.05" and headline.fmt(1.0, "p") == "1" and headline.fmt(None, "p") == "-"


def test_markdown_summary_has_every_headline_metric_and_links():
    from selfevolve.reporting.summary import markdown

    md = markdown([{"cycle": "base", "frontier accuracy": 0.308}, {"cycle": "c1", "frontier p vs base": 2.7e-19}],
                  {"report": "reports/report.md"})
    lines = md.splitlines()
    assert lines[0].count("|") == len(headline.HEADLINE) + 2 and "frontier p vs base" in lines[0]
    assert lines[2].startswith("| base | 0.308 |") and "| 2.7e-19 |" in lines[3]
    assert lines[-1] == "- report: reports/report.md"
