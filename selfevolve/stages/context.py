"""What every stage is given: a ``StageContext``, built once per stage run by the runner.

It holds the validated params, the cycle (``base`` for the stages before the first cycle) and the
project root, and derives from them everything a stage needs to find its files and models and to
be reproducible on its own: the cycle's paths and those of the cycle it starts from, the model it
generates with, seeds and RNGs derived from ``(params.seed, cycle, purpose)``, sampling settings and
the backend.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from selfevolve.backends.base import Backend, SamplingConfig
from selfevolve.config import Params
from selfevolve.paths import CyclePaths, cycle_paths
from selfevolve.seeding import derive_seed

if TYPE_CHECKING:
    from selfevolve.records import Rollout
    from selfevolve.stages.shards import Shard  # only the shardable stages use it (and so depend on it in dvc.yaml)

log = logging.getLogger("selfevolve")

#: Where the bootstrap stage puts the embedded model (``model.base`` names it by default).
EMBEDDED = "models/base"


def _no_steps(step: int, metrics: dict) -> None:
    return None


def _no_traces(roots: list) -> list[str]:
    return []


@dataclass
class StageContext:
    """One stage run's view of the campaign.

    ``log_step(step, metrics)`` records per-step metrics of long stages (training curves) with the
    stage's tracking run, ``log_traces(spans)`` a bounded sample of items as MLflow traces
    (``selfevolve.tracking.StageRun.log_traces``); both do nothing when the stage runs untracked. ``shard`` / ``merge`` are
    set only for the runs of a sharded stage (``selfevolve.stages.shards.sharded_rows``).
    """

    params: Params
    cycle: str
    root: Path = Path(".")
    log_step: Callable[[int, dict], None] = field(default=_no_steps)
    log_traces: Callable[[list], list[str]] = field(default=_no_traces)
    shard: Shard | None = None   # this run computes one shard of a shardable stage (selfevolve.stages.shards)
    merge: int = 0               # this run joins the stage's ``merge`` shard parts

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if self.cycle != "base":
            self.params.cycle_index(self.cycle)  # raises KeyError naming the defined cycles

    # -- where things are -------------------------------------------------------------------
    @property
    def paths(self) -> CyclePaths:
        """This cycle's paths."""
        return cycle_paths(self.cycle, self.root)

    @property
    def base(self) -> CyclePaths:
        """The base cycle's paths (seed set, validation and held-out questions, base model)."""
        return cycle_paths("base", self.root)

    @property
    def init_cycle(self) -> str:
        """The cycle this one starts from (``base`` for the first). Raises ``ValueError`` for base."""
        if self.cycle == "base":
            raise ValueError("the base cycle starts from nothing")
        return self.params.cycles[self.cycle].init

    @property
    def init(self) -> CyclePaths:
        """Paths of the cycle this one starts from: its pool, its champions, its model."""
        return cycle_paths(self.init_cycle, self.root)

    @property
    def index(self) -> int:
        """0 for base, 1.. for the cycles in params order."""
        return 0 if self.cycle == "base" else self.params.cycle_index(self.cycle)

    def base_model(self) -> str:
        """The campaign's starting model: the embedded tiny model at ``models/base`` (default), or
        the local path / hub id in ``params.model.base`` (a preset such as configs/qwen2.5-7b-vllm.yaml)."""
        from selfevolve.backends.gguf_model import is_gguf_source

        base = self.params.model.base
        if base == EMBEDDED or is_gguf_source(base):  # built or converted there by the bootstrap stage
            return str(self.root / EMBEDDED)
        local = Path(base) if Path(base).is_absolute() else self.root / base
        return str(local) if local.exists() else base

    def init_model(self) -> str:
        """The model a cycle's generation stages use: ``models/<init>``, or the base model."""
        return self.base_model() if self.init_cycle == "base" else str(self.init.model)

    def model(self) -> str:
        """The model this cycle produced (the base model for ``base``)."""
        return self.base_model() if self.cycle == "base" else str(self.paths.model)

    def distilled_before(self) -> list["Rollout"]:
        """Every row distilled before this cycle, in order: the starting cycle's
        ``earlier_distilled.jsonl`` and then its ``mass/distill.jsonl`` (either may be missing).
        Raises what ``records.read_jsonl`` raises on a malformed row."""
        from selfevolve.records import Rollout, read_jsonl

        return [r for f in (self.init.earlier_distilled, self.init.mass_distill) if f.exists() for r in read_jsonl(f, Rollout)]

    @property
    def data_dir(self) -> Path:
        """``seeds.data_dir`` (local benchmark files), relative to the project root."""
        d = Path(self.params.seeds.data_dir)
        return d if d.is_absolute() else self.root / d

    # -- reproducibility --------------------------------------------------------------------
    def seed(self, purpose: str) -> int:
        """A seed derived from ``(params.seed, cycle, purpose)``: every stage reproducible on its own."""
        return derive_seed(self.params.seed, self.cycle, purpose)

    def rng(self, purpose: str) -> random.Random:
        return random.Random(self.seed(purpose))

    def sampling(self, purpose: str, n: int = 1, temperature: float | None = None,
                 max_new_tokens: int | None = None) -> SamplingConfig:
        """``params.sampling`` as a ``SamplingConfig`` seeded for ``purpose``."""
        s = self.params.sampling
        return SamplingConfig(temperature=s.temperature if temperature is None else temperature, top_p=s.top_p,
                              max_new_tokens=max_new_tokens or s.max_new_tokens, n=n, seed=self.seed(purpose))

    # -- the model --------------------------------------------------------------------------
    def chat(self, role: str, prompt: str, domain: str = "math") -> list[dict[str, str]]:
        """The conversation asking ``prompt`` (a rendered ``role`` prompt), after the role's worked
        exchanges when ``model.worked_examples`` is on (``selfevolve.roles.templates.chat``; those
        written for the seed set, e.g. ``arith``, where the role has them)."""
        from selfevolve.roles.templates import chat

        return chat(role, prompt, self.params.model.worked_examples, domain, self.params.seeds.set)

    def backend(self, model: str | Path | None = None) -> Backend:
        """The configured backend (``model.backend``) serving ``model`` (default: the cycle's
        starting model). Use it as a context manager so it is closed."""
        from selfevolve.backends import make_backend

        return make_backend(self.params.model, model_path=str(model if model is not None else self.init_model()))
