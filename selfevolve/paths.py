"""Where every stage reads and writes: the one definition of the on-disk layout.

``dvc.yaml`` spells the same paths (``data/cycles/${key}/...``, ``models/${key}``); a test checks
that every path here appears in ``dvc.yaml`` so the two cannot drift apart.

::

    data/cycles/base/pool.jsonl      seed set = the pool before cycle 1
    data/cycles/base/val.jsonl       validation questions (checkpoint selection in train_rl)
    data/cycles/base/heldout.jsonl   held-out test questions (evaluate)
    models/base/                     the bootstrapped model
    data/cycles/<c>/...              one folder per cycle (stage outputs below)
    models/<c>-rl/                   RL checkpoint of cycle c (best by validation accuracy)
    models/<c>/                      model of cycle c (after MASS SFT): cycle c+1 starts here
    metrics/<c>/*.json               DVC metrics per stage
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CyclePaths:
    root: Path
    cycle: str

    @property
    def dir(self) -> Path:
        return self.root / "data" / "cycles" / self.cycle

    def _f(self, name: str) -> Path:
        return self.dir / name

    # base cycle
    @property
    def pool(self) -> Path:
        return self._f("pool.jsonl")

    @property
    def val(self) -> Path:
        return self.root / "data" / "cycles" / "base" / "val.jsonl"

    @property
    def heldout(self) -> Path:
        return self.root / "data" / "cycles" / "base" / "heldout.jsonl"

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
    def rl_dataset(self) -> Path:
        return self._f("rl_dataset.jsonl")

    @property
    def sft_dataset(self) -> Path:
        return self._f("sft_dataset.jsonl")

    @property
    def eval_dir(self) -> Path:
        return self._f("eval")

    @property
    def model(self) -> Path:
        return self.root / "models" / self.cycle

    @property
    def rl_model(self) -> Path:
        return self.root / "models" / f"{self.cycle}-rl"

    def metrics(self, stage: str) -> Path:
        return self.root / "metrics" / self.cycle / f"{stage}.json"


def cycle_paths(cycle: str, root: str | Path = ".") -> CyclePaths:
    return CyclePaths(Path(root), cycle)
