"""Where every stage reads and writes: the one definition of the on-disk layout.

::

    data/cycles/base/pool.jsonl      seed set = the pool before cycle 1
    data/cycles/base/val.jsonl       validation questions (checkpoint selection in training)
    data/cycles/base/heldout.jsonl   held-out test questions (evaluate)
    data/cycles/base/replay.jsonl    the warm start's transcripts (replayed while training cycles)
    data/cycles/base/self_labels.jsonl, earlier_labels.jsonl   empty: the base cycle learned from no self-labels
    models/base/                     the bootstrapped model (or reference.json naming a hub model)
    data/cycles/<c>/...              one folder per cycle (stage outputs below)
    data/cycles/<c>/mass/            MASS search result, champions, champion trajectories
    data/cycles/<c>/eval/            per-question evaluation results
    models/<c>-rl/                   RL checkpoint of cycle c
    models/<c>/                      model of cycle c (after MASS SFT): cycle c+1 starts here
    metrics/<c>/<stage>.json         DVC metrics per stage (base stages under metrics/base/)
    reports/                         the campaign report (``selfevolve report``)

``dvc.yaml`` is generated from these paths (``CyclePaths(".", "${key}")`` spells a cycle's paths
with DVC's template variables), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CyclePaths:
    """Paths of one cycle (``base`` for the seed set and the base model) under ``root``."""

    root: Path
    cycle: str

    @property
    def dir(self) -> Path:
        return self.root / "data" / "cycles" / self.cycle

    def _f(self, name: str) -> Path:
        return self.dir / name

    @property
    def base(self) -> "CyclePaths":
        return CyclePaths(self.root, "base")

    # the seed set (base cycle) and every cycle's pool
    @property
    def pool(self) -> Path:
        return self._f("pool.jsonl")

    @property
    def val(self) -> Path:
        return self.base._f("val.jsonl")

    @property
    def heldout(self) -> Path:
        return self.base._f("heldout.jsonl")

    # stage outputs of a cycle
    @property
    def challenge(self) -> Path:
        return self._f("challenge.jsonl")

    @property
    def critic_questions(self) -> Path:
        return self._f("critic_questions.jsonl")

    @property
    def solve_set(self) -> Path:
        return self._f("solve_set.jsonl")

    @property
    def plans(self) -> Path:
        return self._f("plans.jsonl")

    @property
    def critic_plans(self) -> Path:
        return self._f("critic_plans.jsonl")

    @property
    def attempts(self) -> Path:
        return self._f("attempts.jsonl")

    @property
    def verdicts(self) -> Path:
        return self._f("verdicts.jsonl")

    @property
    def rollouts(self) -> Path:
        return self._f("rollouts.jsonl")

    @property
    def mass_dir(self) -> Path:
        return self._f("mass")

    @property
    def mass_search(self) -> Path:
        return self.mass_dir / "search.json"

    @property
    def mass_champions(self) -> Path:
        return self.mass_dir / "champions.json"

    @property
    def mass_trajectories(self) -> Path:
        return self.mass_dir / "trajectories.jsonl"

    @property
    def mass_distill(self) -> Path:
        """Solver rows that distil the champion into the single pass (``selfevolve.mass.distill``)."""
        return self.mass_dir / "distill.jsonl"

    @property
    def mass_distill_report(self) -> Path:
        """Which forms the champion and one pass were probed on, their accuracies and which were distilled."""
        return self.mass_dir / "distill.json"

    @property
    def rl_dataset(self) -> Path:
        return self._f("rl_dataset.jsonl")

    @property
    def self_labels(self) -> Path:
        """The Solver's verified completions of this cycle (expert iteration's training rows)."""
        return self._f("self_labels.jsonl")

    @property
    def replay(self) -> Path:
        """The warm start's transcripts, replayed while training every cycle (base cycle only)."""
        return self._f("replay.jsonl")

    @property
    def earlier_labels(self) -> Path:
        """Every earlier cycle's self-labels (the starting cycle's ``earlier_labels`` plus its
        ``self_labels``): trained on again with this cycle's, so a skill learned once is kept."""
        return self._f("earlier_labels.jsonl")

    @property
    def earlier_distilled(self) -> Path:
        """Every earlier cycle's distilled team runs and turns (the starting cycle's
        ``earlier_distilled`` plus its ``mass/distill.jsonl``): distilled again with this cycle's, so
        a reach the team carried into one pass once is kept."""
        return self._f("earlier_distilled.jsonl")

    @property
    def sft_dataset(self) -> Path:
        return self._f("sft_dataset.jsonl")

    @property
    def eval_dir(self) -> Path:
        return self._f("eval")

    def eval_file(self, benchmark: str) -> Path:
        """Per-question results of one benchmark (``eval/<benchmark>.jsonl``)."""
        return self.eval_dir / f"{benchmark}.jsonl"

    @property
    def mass_eval(self) -> Path:
        """The cycle's MASS champion vs the single agent on held-out questions."""
        return self.eval_dir / "mass.json"

    @property
    def model(self) -> Path:
        return self.root / "models" / self.cycle

    @property
    def rl_model(self) -> Path:
        return self.root / "models" / f"{self.cycle}-rl"

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics" / self.cycle

    def metrics(self, stage: str) -> Path:
        return self.metrics_dir / f"{stage}.json"


def cycle_paths(cycle: str, root: str | Path = ".") -> CyclePaths:
    return CyclePaths(Path(root), cycle)


def reports_dir(root: str | Path = ".") -> Path:
    """Where ``selfevolve report`` writes by default."""
    return Path(root) / "reports"
