"""Reading a finished (or partly finished) campaign: every stage's metrics, pools, MASS search
results and held-out outcomes per cycle, tolerating missing or unreadable files (they are noted in
``CampaignData.missing``). Paths come from ``selfevolve.paths``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path



@dataclass
class CampaignData:
    """Everything the report reads. ``cycles`` starts with ``base``; ``metrics[c][stage]`` is the
    stage's metrics dict; ``pools[c]`` the pool as ``Question`` records (absent when missing);
    ``mass[c]`` the parsed ``search.json``; ``missing`` human-readable notes on absent inputs."""

    campaign: str
    cycles: list[str]
    metrics: dict[str, dict[str, dict]] = field(default_factory=dict)
    pools: dict[str, list] = field(default_factory=dict)
    mass: dict[str, dict] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    heldout: dict[str, dict[str, int]] = field(default_factory=dict)
    heldout_questions: list = field(default_factory=list)

    def heldout_p_vs_base(self, cycle: str) -> float | None:
        """Exact McNemar p-value of the cycle's held-out outcomes against the base model's on the
        questions both were graded on (``eval/heldout.jsonl``, first sample); ``None`` without both."""
        from selfevolve.stats import mcnemar_exact

        base, cur = self.heldout.get("base"), self.heldout.get(cycle)
        if cycle == "base" or not base or not cur:
            return None
        ids = sorted(set(base) & set(cur))
        return mcnemar_exact([base[i] for i in ids], [cur[i] for i in ids])[0] if ids else None

    def form_accuracy(self, cycle: str) -> dict[str, float]:
        """The cycle's held-out accuracy per arith form, ``{"4+3": accuracy in [0, 1]}``, from the
        ``heldout_accuracy_form_4_3`` keys of its ``evaluate.json`` (``{}`` without them)."""
        return {k.removeprefix("heldout_accuracy_form_").replace("_", "+"): float(v)
                for k, v in self.metrics.get(cycle, {}).get("evaluate", {}).items()
                if k.startswith("heldout_accuracy_form_") and isinstance(v, (int, float)) and not isinstance(v, bool)}

    def metric(self, cycle: str, stage: str, key: str) -> float | None:
        v = self.metrics.get(cycle, {}).get(stage, {}).get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def collect_campaign(root: str | Path = ".", params_path: str | Path | None = None) -> CampaignData:
    """Read the campaign under ``root`` (cycles from ``params_path``, default ``<root>/params.yaml``).
    Raises ``ParamsError`` for a missing or invalid params file; unreadable stage outputs are
    skipped and noted in ``missing``."""
    from selfevolve.config import load_params
    from selfevolve.paths import cycle_paths
    from selfevolve.records import Question, RecordFileError, iter_json_lines, read_jsonl

    root = Path(root)
    params = load_params(Path(params_path) if params_path else root / "params.yaml")
    data = CampaignData(campaign=params.campaign, cycles=["base", *params.cycle_names()], params=params.model_dump(mode="json"))
    base = cycle_paths("base", root)
    if base.heldout.is_file():
        try:
            data.heldout_questions = read_jsonl(base.heldout, Question)
        except (OSError, RecordFileError) as exc:
            data.missing.append(f"{base.heldout}: unreadable ({exc})")
    for c in data.cycles:
        P = cycle_paths(c, root)
        mdir = P.metrics_dir
        data.metrics[c] = {}
        for f in sorted(mdir.glob("*.json")) if mdir.is_dir() else []:
            try:
                obj = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                data.missing.append(f"{f}: unreadable ({exc})")
                continue
            if isinstance(obj, dict):
                data.metrics[c][f.stem] = obj
        if not data.metrics[c]:
            data.missing.append(f"{mdir}: no metrics files")
        held = P.eval_file("heldout")
        if held.is_file():
            try:
                data.heldout[c] = {str(r["id"]): int(bool(r["correct"][0])) for _, r in iter_json_lines(held)
                                   if r.get("id") is not None and isinstance(r.get("correct"), list) and r["correct"]}
            except (OSError, RecordFileError) as exc:
                data.missing.append(f"{held}: unreadable ({exc})")
        if P.pool.is_file():
            try:
                data.pools[c] = read_jsonl(P.pool, Question)
            except (OSError, RecordFileError) as exc:
                data.missing.append(f"{P.pool}: unreadable ({exc})")
        else:
            data.missing.append(f"{P.pool}: missing")
        if c != "base":
            search = P.mass_search
            if search.is_file():
                try:
                    data.mass[c] = json.loads(search.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as exc:
                    data.missing.append(f"{search}: unreadable ({exc})")
            else:
                data.missing.append(f"{search}: missing")
    return data
