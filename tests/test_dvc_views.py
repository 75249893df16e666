"""What DVC shows of a campaign: ``dvc metrics show reports/headline`` fits 100 columns with
p-values readable, ``dvc plots show`` draws the headline series on whole cycles with Vega inlined
(no CDN), and its output folder is ignored by git."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from selfevolve.reporting.report import _write_headline_files
from selfevolve.reporting.series import DVC_PLOTS, PLOTS_PAGE, write_plots_page

ROOT = Path(__file__).resolve().parents[1]


def _dvc(root, *args):
    r = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True, text=True,
                       env={"DVC_NO_ANALYTICS": "1", "PATH": "/usr/bin:/bin", "HOME": str(root)})
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_headline_metrics_and_offline_plots(tmp_path):
    root = tmp_path
    _dvc(root, "init", "--no-scm", "-q")
    shutil.copytree(ROOT / ".dvc" / "plots", root / ".dvc" / "plots")
    (root / ".dvc" / "config").write_text((ROOT / ".dvc" / "config").read_text().split("['remote")[0].replace("remote = local", "")
                                          + "[plots]\n    html_template = ../" + PLOTS_PAGE + "\n")
    (root / "dvc.yaml").write_text(yaml.safe_dump({"plots": DVC_PLOTS}))
    rows = []
    for i, (c, acc, p) in enumerate((("base", 0.308, None), ("c1", 0.494, 2.72109334e-19), ("c2", 0.5, 0.23))):
        (root / "metrics" / c).mkdir(parents=True)
        ev = {"heldout_frontier_accuracy": acc, "heldout_seed_accuracy": 0.98, "heldout_beyond_accuracy": 0.05,
              "heldout_reach_50": 7 + i, "heldout_reach_90": 5 + i, **({"heldout_frontier_p_vs_base": p} if p else {})}
        (root / "metrics" / c / "evaluate.json").write_text(json.dumps(ev))
        rows.append({"cycle": c, "step": i, **{k: v for k, v in ev.items() if "p_vs" not in k}})
    (root / "reports").mkdir()
    (root / "reports" / "headline.json").write_text(json.dumps(rows))
    _write_headline_files(root, ["base", "c1", "c2"], root / "reports" / "headline")
    write_plots_page(root / PLOTS_PAGE)

    shown = _dvc(root, "metrics", "show", "reports/headline")
    lines = shown.splitlines()
    assert len(lines) == 4 and max(map(len, lines)) <= 100, shown
    c1 = next(line for line in lines if "c1.json" in line).split()
    assert lines[0].split()[1:] == ["beyond", "frontier", "p_frontier", "reach50", "reach90", "seed"]
    assert c1[1:] == ["0.05", "0.494", "2.7e-19", "8", "6", "0.98"], shown

    _dvc(root, "plots", "show")
    page = (root / "dvc_plots" / "index.html").read_text()
    assert not re.search(r"<script[^>]+src=", page) and "cdn.jsdelivr" not in page
    assert "window.vegaEmbed" in page and "vegaEmbed('#held-out_accuracy_per_cycle" in page
    assert '"type": "ordinal"' in page and '"heldout_frontier_accuracy"' in page
    ignored = subprocess.run(["git", "check-ignore", "-q", "dvc_plots/index.html"], cwd=ROOT)
    assert ignored.returncode == 0
