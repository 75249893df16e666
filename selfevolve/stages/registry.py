"""The stage registry: the one list of the pipeline's stages, in DAG order.

Each ``Stage`` names its function (a real reference, so the arrow from the registry to every stage
is visible to readers and type checkers), whether it runs per cycle, the files it reads and writes
(as ``CyclePaths`` attributes of this cycle, the cycle it starts from, or the base cycle), the
``params.yaml`` keys it depends on, and the outputs logged to MLflow as artifacts
(per-question records included; each cycle's model is registered with the report instead).

Everything else derives from this list: the ``selfevolve <stage>`` commands, ``dvc.yaml``
(``selfevolve.stages.dvc_yaml``, with each stage's code dependencies found from its imports), the
Prefect tasks (``tasks/repro.py``) and the cycle flow, and the SAGE benchmark's runs.

``resource`` is the stage's resource class: ``gpu`` for the stages that generate with or train the
model (placed on the GPU work pool when the backend needs a GPU), ``cpu`` for grading, rewards,
datasets (``selfevolve.stages.placement``).

Paths are written ``"<which>.<attribute>"`` with ``which`` one of ``cycle`` (the stage's own cycle),
``init`` (the cycle it starts from: ``base`` for the first) and ``base``; e.g. ``"init.model"`` is
``models/<init>``, ``"cycle.challenge"`` is ``data/cycles/<cycle>/challenge.jsonl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from selfevolve.stages import base, challenge, critic, evaluate, mass, rewards, solve, train
from selfevolve.stages.context import StageContext


@dataclass(frozen=True)
class Stage:
    """One stage of the DAG (see the module docstring for the path notation)."""

    name: str
    run: Callable[[StageContext], dict]
    per_cycle: bool
    deps: tuple[str, ...]
    outs: tuple[str, ...]
    params: tuple[str, ...]
    artifacts: tuple[str, ...] = ()
    fixed_cycle: str | None = None       # the cycle a non-per-cycle stage runs for ("base")
    command: str | None = None           # the ``selfevolve`` command (default: the name with dashes)
    metrics_name: str | None = None      # metrics/<cycle>/<metrics_name>.json (default: the name)
    resource: str = "cpu"                # resource class: "gpu" for stages that run the model (README "Running on a cluster")
    shardable: bool = False              # can split into ``placement.shards`` shards (selfevolve.stages.shards)

    @property
    def cli_name(self) -> str:
        return self.command or self.name.replace("_", "-")

    @property
    def metrics_file(self) -> str:
        return self.metrics_name or self.name

    def cycle_of(self, cycle: str | None) -> str:
        """The cycle a run of this stage is for: ``cycle`` for per-cycle stages (required), the
        fixed cycle otherwise. Raises ``ValueError`` when a per-cycle stage gets no cycle."""
        if self.per_cycle:
            if not cycle:
                raise ValueError(f"stage '{self.name}' runs per cycle: give the cycle (--cycle)")
            return cycle
        return self.fixed_cycle or "base"


#: Every generation stage samples from the model with these, in the environment of the seed set
#: (``seeds.set`` picks the prompts, parsers and verifier: ``questions.seed_sets.environment``).
_GEN = ("seed", "sampling", "model", "seeds.set")

STAGES: tuple[Stage, ...] = (
    Stage("seeds", base.seeds, False, deps=(), outs=("base.pool", "base.val", "base.heldout", "base.mass_champions",
                                             "base.mass_distill", "base.earlier_distilled"),
          params=("seed", "seeds")),
    Stage("bootstrap", base.bootstrap, False, deps=("base.pool", "base.val"),
          outs=("base.model", "base.replay", "base.self_labels", "base.earlier_labels"),
          params=("seed", "bootstrap", "seeds", "model", "sampling", "evaluation", "verifiers", "rl.mastered_accuracy"), resource="gpu"),
    Stage("evaluate_base", evaluate.evaluate, False, deps=("base.model", "base.heldout"), outs=("base.eval_dir",),
          params=("seed", "evaluation", "verifiers", "model", "sampling", "seeds.set", "seeds.data_dir"), fixed_cycle="base",
          command="evaluate", metrics_name="evaluate", artifacts=("eval_dir",), resource="gpu"),
    Stage("challenge", challenge.challenge, True, deps=("init.model", "init.pool"), outs=("cycle.challenge",),
          params=(*_GEN, "verifiers", "sage.questions_per_cycle", "sage.frontier_band", "sage.frontier_boost", "sage.edge_share"),
          artifacts=("challenge",), resource="gpu"),
    Stage("critic_questions", critic.critic_questions, True, deps=("init.model", "cycle.challenge"),
          outs=("cycle.critic_questions",),
          params=(*_GEN, "sage.alpha", "sage.critic_unparseable_score", "sage.ablation.critic"), artifacts=("critic_questions",), resource="gpu"),
    Stage("plan", solve.plan, True, deps=("init.model", "init.pool", "cycle.challenge", "cycle.critic_questions"),
          outs=("cycle.solve_set", "cycle.plans"), params=(*_GEN, "sage.pool_sample", "sage.frontier_band", "sage.frontier_boost", "sage.ablation.planner",
                                                           "sage.next_rung_questions"),
          artifacts=("plans",), resource="gpu"),
    Stage("critic_plans", critic.critic_plans, True, deps=("init.model", "cycle.solve_set", "cycle.plans"),
          outs=("cycle.critic_plans",),
          params=(*_GEN, "sage.beta", "sage.critic_unparseable_score", "sage.ablation.critic"), artifacts=("critic_plans",), resource="gpu"),
    Stage("solve", solve.solve, True, deps=("init.model", "cycle.solve_set", "cycle.plans", "cycle.critic_plans"),
          outs=("cycle.attempts",), params=(*_GEN, "sage.solver_samples", "sage.rollout_block"), artifacts=("attempts",), resource="gpu", shardable=True),
    Stage("verify", solve.verify, True, deps=("cycle.solve_set", "cycle.attempts"), outs=("cycle.verdicts",),
          params=("verifiers",), artifacts=("verdicts",), shardable=True),
    Stage("rewards", rewards.rewards, True,
          deps=("init.pool", "cycle.challenge", "cycle.critic_questions", "cycle.solve_set", "cycle.plans", "cycle.critic_plans",
                "cycle.attempts", "cycle.verdicts"),
          outs=("cycle.rollouts", "cycle.pool"), params=("sage",), artifacts=("pool",)),
    Stage("mass_search", mass.mass_search, True,
          deps=("init.model", "init.mass_champions", "init.mass_distill", "init.earlier_distilled", "cycle.pool"), outs=("cycle.mass_dir",),
          params=(*_GEN, "mass", "verifiers", "sage.frontier_band", "seeds.arith", "evaluation.max_new_tokens"), artifacts=("mass_dir",), resource="gpu"),
    Stage("datasets", train.datasets, True,
          deps=("cycle.rollouts", "cycle.pool", "cycle.solve_set", "cycle.attempts", "cycle.verdicts", "cycle.mass_trajectories",
                "cycle.mass_champions", "init.earlier_labels", "init.self_labels", "init.mass_distill", "init.earlier_distilled"),
          outs=("cycle.rl_dataset", "cycle.self_labels", "cycle.earlier_labels", "cycle.earlier_distilled", "cycle.sft_dataset"),
          params=("sage.ablation", "rl.algorithm", "rl.skip_no_spread", "sage.frontier_band", "rl.labels_per_question", "rl.retention_labels",
                  "mass.enabled")),
    Stage("train_rl", train.train_rl, True,
          deps=("init.model", "cycle.rl_dataset", "cycle.self_labels", "cycle.earlier_labels", "cycle.earlier_distilled", "base.replay",
                "cycle.solve_set", "base.val"),
          outs=("cycle.rl_model",), params=(*_GEN, "rl", "sage", "verifiers", "evaluation"), resource="gpu"),
    Stage("train_sft", train.train_sft, True, deps=("cycle.rl_model", "cycle.sft_dataset", "cycle.mass_distill", "cycle.mass_distill_report",
                                                    "base.val", "base.heldout", "base.replay", "cycle.earlier_labels", "cycle.self_labels",
                                                    "cycle.earlier_distilled"),
          outs=("cycle.model",),
          params=("seed", "sft", "model", "rl.eval_questions", "rl.mastered_accuracy", "rl.retention_tolerance", "rl.retention_slack",
                  "verifiers", "evaluation", "mass.enabled"), resource="gpu"),
    Stage("evaluate", evaluate.evaluate, True, deps=("cycle.model", "base.heldout", "base.eval_dir", "init.eval_dir", "cycle.mass_champions"),
          outs=("cycle.eval_dir",),
          params=("seed", "evaluation", "verifiers", "model", "sampling", "seeds.set", "seeds.data_dir", "mass"), artifacts=("eval_dir",),
          resource="gpu"),
)

BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
#: The stages before the first cycle, in order.
BASE_STAGES: tuple[Stage, ...] = tuple(s for s in STAGES if not s.per_cycle)
#: The stages of one cycle, in DAG order.
CYCLE_STAGES: tuple[Stage, ...] = tuple(s for s in STAGES if s.per_cycle)


def get(name: str) -> Stage:
    """The stage called ``name``. Raises ``KeyError`` listing the stages for an unknown name."""
    if name not in BY_NAME:
        raise KeyError(f"unknown stage {name!r}; the stages are {[s.name for s in STAGES]}")
    return BY_NAME[name]
