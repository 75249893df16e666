"""Stages that turn a cycle's records into a better model: ``datasets`` (RL rows with per-role
advantages, SFT chats from the MASS champion's trajectories), ``train_rl`` and ``train_sft``.

Training validates through a callback built here (``validator``): greedy Solver correctness on
the validation questions with the model being trained, graded by the verifiers, so ``training/``
knows nothing of evaluation.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from statistics import fmean

from selfevolve.evaluation.solve import SolveConfig, correctness
from selfevolve.records import Attempt, Question, Rollout, Trajectory, Verdict, read_jsonl, write_jsonl
from selfevolve.stages.context import StageContext, log


def solve_outcomes(questions: list[Question], attempts: list[Attempt], verdicts: dict[str, Verdict]
                   ) -> tuple[dict[str, list[Attempt]], dict[str, list[float]], dict[str, float]]:
    """A cycle's solve outcomes: the attempts per question id, the verdicts' ``correct`` (0-1) per
    question id of ``questions`` that has attempts, and the pass rate per form (``Question.form``)
    over all of this cycle's samples of that form's questions."""
    by_q: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_q[a.question_id].append(a)
    hits = {q.id: [verdicts[a.id].correct for a in by_q[q.id]] for q in questions if by_q.get(q.id)}
    per_form: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        if q.form and q.id in hits:
            per_form[q.form] += hits[q.id]
    return by_q, hits, {form: fmean(h) for form, h in per_form.items()}


def self_labels(questions: list[Question], attempts: list[Attempt], verdicts: dict[str, Verdict], band: tuple[float, float],
                per_question: int, cycle: str) -> tuple[list[Rollout], dict]:
    """The Solver's verified completions worth learning from: for each question on the Solver's
    frontier whose reference is trusted (computed by the environment, a dataset answer, or a
    pseudo-label the Solver majority confirmed), up to ``per_question`` distinct completions the
    verifier accepted that are written in the Solver's format (``roles.parsers.well_formed_solver``:
    a right answer reached through stray tags or without working is not imitated).

    A question is on the frontier when its pass rate over its n samples lies in ``band``
    (inclusive), or when it has a form (``Question.form``, e.g. ``"4+3"``) whose pass rate over all
    of this cycle's samples of that form lies in ``band``: a rung the Solver is learning is learned
    from every question of it the Solver got right, the ones it got right every time included (Lee
    et al. 2025, "Self-Improving Transformers Overcome Easy-to-Hard and Length Generalization
    Challenges", sec. 3: each round labels the whole next length). Measured: in seed 0's c2 the
    Solver got 33 of 49 4+3 questions right 4 times in 4 (the form's rate 0.75, its held-out
    accuracy 0.45) and the per-question band took 9 of them (docs/measurements.md).

    Returns (rows, counts): ``questions_in_band``, ``questions_in_band_by_form`` (those in only by
    their form's rate), ``self_labels`` and ``self_labels_malformed`` (verified completions left
    out for their form)."""
    from selfevolve.roles.parsers import well_formed_solver

    by_q, hits, form_rate = solve_outcomes(questions, attempts, verdicts)
    lo, hi = band
    rate = {qid: fmean(h) for qid, h in hits.items()}
    learning = {form for form, r in form_rate.items() if lo <= r <= hi}
    rows: list[Rollout] = []
    in_band = by_form = malformed = 0
    for q in questions:
        if q.id not in rate:
            continue
        if not lo <= rate[q.id] <= hi:
            if q.form not in learning:
                continue
            by_form += 1
        in_band += 1
        seen: set[str] = set()
        for a in by_q[q.id]:
            if verdicts[a.id].correct < 1.0 or a.completion in seen or len(seen) >= per_question:
                continue
            if not well_formed_solver(a.completion):
                malformed += 1
                continue
            seen.add(a.completion)
            rows.append(Rollout(id=f"{cycle}-label-{a.id}", role="solver", group=q.id, question_id=q.id, prompt=a.prompt,
                                completion=a.completion, reward=1.0,
                                detail={"source": "self_label", "cycle": cycle, "pass_rate": rate[q.id], "level": q.level}))
    return rows, {"questions_in_band": in_band, "questions_in_band_by_form": by_form, "self_labels": len(rows),
                  "self_labels_malformed": malformed}


def retention_labels(questions: list[Question], attempts: list[Attempt], verdicts: dict[str, Verdict], taught: set[str],
                     band: tuple[float, float], labelled: set[str], cycle: str) -> list[Rollout]:
    """One verified, well-formed completion of every question the Solver answered right in all its
    samples, in a form of ``taught`` (the forms earlier cycles' self-labels taught) that is past the
    learning band (the form's pass rate this cycle above ``band[1]``), unless ``labelled`` (question
    ids already among the self-labels) has it. Source ``retain``.

    Why: a form the cycles taught is protected by nothing once mastered (the warm start's replay covers
    the seed forms; :func:`self_labels` takes the frontier). Measured on seed 2's c2 with the
    next-rung questions (docs/measurements.md, "December 4 (night)"): training on 5+3 and 5+4 labels
    took 4+3 from 0.99 to 0.92 on validation and the retention guard kept the start; with these
    labels (640 of 1,354) 4+3 held (1.00), the whole mastered set lost 0.5 points and the cycle was
    kept. ReST-EM (Singh et al. 2023) keeps every correct sample; Lee et al. 2025 replay every round.
    The ``datasets`` stage keeps at most as many as the cycle's self-labels (a seeded sample):
    uncapped, seed 0's 1,327 retention rows beside 295 labels slowed its c2 (held-out frontier
    0.892 against 0.938 without them)."""
    from selfevolve.roles.parsers import well_formed_solver

    by_q, hits, form_rate = solve_outcomes(questions, attempts, verdicts)
    past = {form for form, r in form_rate.items() if form in taught and r > band[1]}
    rows = []
    for q in questions:
        if q.form not in past or q.id in labelled or q.id not in hits or min(hits[q.id]) < 1.0:
            continue
        a = next((a for a in by_q[q.id] if well_formed_solver(a.completion)), None)
        if a is not None:
            rows.append(Rollout(id=f"{cycle}-retain-{a.id}", role="solver", group=q.id, question_id=q.id, prompt=a.prompt,
                                completion=a.completion, reward=1.0,
                                detail={"source": "retain", "cycle": cycle, "pass_rate": 1.0, "level": q.level, "form": q.form}))
    return rows


def datasets(ctx: StageContext) -> dict:
    """Build the training data of the cycle:

    * ``rl_dataset.jsonl``: rollouts with per-role advantages (Task-Relative REINFORCE++; ablations
      drop untrained roles; groups without reward spread skipped). With ``rl.algorithm =
      expert_iteration`` the Solver learns from its self-labels instead, so its rollouts stay out.
    * ``self_labels.jsonl``: the Solver's verified, well-formed completions of questions in
      ``sage.frontier_band`` (:func:`self_labels`; none when ``sage.ablation.train_solver`` is off).
    * ``earlier_labels.jsonl``: every earlier cycle's self-labels (the starting cycle's earlier
      labels plus its self-labels).
    * ``earlier_distilled.jsonl``: every earlier cycle's distilled team runs and turns (the starting
      cycle's earlier distilled rows plus its ``mass/distill.jsonl``), distilled again by
      ``train_sft`` beside this cycle's.
    * ``sft_dataset.jsonl``: the MASS champion's verified runs as SFT chats: single-pass Solver
      chats, or each agent's own turns when the answer agent is not the Solver (``selfevolve.mass.sft_data``).
    """
    from selfevolve.mass.sft_data import chats_to_records, trajectories_to_chats
    from selfevolve.training.advantages import role_advantages

    P, params = ctx.paths, ctx.params
    ab, rl = params.sage.ablation, params.rl
    rollouts = read_jsonl(P.rollouts, Rollout)
    dropped = {r for r, keep in (("challenger", ab.train_challenger), ("solver", ab.train_solver)) if not keep}
    if rl.algorithm == "expert_iteration":
        dropped.add("solver")
    rl_rows = role_advantages([r for r in rollouts if r.role not in dropped], skip_no_spread=rl.skip_no_spread)
    write_jsonl(P.rl_dataset, rl_rows)
    labels, label_counts = [], {"questions_in_band": 0, "questions_in_band_by_form": 0, "self_labels": 0, "self_labels_malformed": 0}
    if ab.train_solver:
        solved, attempts = read_jsonl(P.solve_set, Question), read_jsonl(P.attempts, Attempt)
        verdicts = {v.attempt_id: v for v in read_jsonl(P.verdicts, Verdict)}
        labels, label_counts = self_labels(solved, attempts, verdicts, params.sage.frontier_band, rl.labels_per_question, ctx.cycle)
    earlier = read_jsonl(ctx.init.earlier_labels, Rollout) + [r for r in read_jsonl(ctx.init.self_labels, Rollout)
                                                               if r.detail.get("source") != "retain"]
    pool = {q.id: q for q in read_jsonl(P.pool, Question)}
    retained = []
    if ab.train_solver and rl.retention_labels:
        taught = {f for r in earlier if r.detail.get("source") == "self_label" and (f := getattr(pool.get(r.question_id), "form", None))}
        retained = retention_labels(solved, attempts, verdicts, taught, params.sage.frontier_band, {r.question_id for r in labels},
                                    ctx.cycle)
        if len(retained) > len(labels):  # the rungs being learned keep at least half of the labelled rows
            retained = sorted(ctx.rng("retention_labels").sample(retained, len(labels)), key=lambda r: r.id)
    write_jsonl(P.self_labels, labels + retained)
    write_jsonl(P.earlier_labels, earlier)
    earlier_distilled = ctx.distilled_before()
    write_jsonl(P.earlier_distilled, earlier_distilled)
    chats = []
    if params.mass.enabled and P.mass_trajectories.exists():
        from selfevolve.mass.design import load_champions

        questions = pool
        chats = trajectories_to_chats(read_jsonl(P.mass_trajectories, Trajectory), questions, load_champions(P.mass_champions))
    write_jsonl(P.sft_dataset, chats_to_records(chats))
    counts = Counter(r.role for r in rl_rows)
    levels = Counter(r.detail.get("level") for r in labels)
    return {"rl_rows": len(rl_rows), "rl_rows_dropped": len(rollouts) - len(rl_rows), "sft_rows": len(chats), "retention_labels": len(retained),
            "earlier_labels": len(earlier), "earlier_distilled": len(earlier_distilled), **label_counts, **{f"rl_rows_{k}": v for k, v in counts.items()},
            **{f"self_labels_level_{k}": v for k, v in sorted(levels.items(), key=lambda kv: str(kv[0])) if k is not None}}


def validation_questions(ctx: StageContext) -> list[Question]:
    """``rl.eval_questions`` validation questions (the same at every check), taken from the head of
    each validation split (``Question.split``: seed levels and frontier) in proportion to its size."""
    qs = read_jsonl(ctx.base.val, Question)
    n = ctx.params.rl.eval_questions
    if len(qs) <= n:
        return qs
    splits: dict[str, list[Question]] = defaultdict(list)
    for q in qs:
        splits[str(q.split)].append(q)
    return [q for group in splits.values() for q in group[: round(n * len(group) / len(qs))]]


def validator(ctx: StageContext, purpose: str):
    """A ``Validation``: greedy Solver correctness of an in-memory model being trained on
    :func:`validation_questions` (``validate(model, tokenizer) -> [0/1]``), with each question's
    ``form``, from which checkpoint selection tells the forms the starting model masters
    (retention) from those being moved. The model answers in ``model.dtype``, as the stages will run
    it once saved (``backends.hf.in_dtype``). The starting model's outcome is read from beside its
    weights when an earlier stage saved it there for the same questions and decoding
    (``training.saved_validation``), and the kept checkpoint's is saved with it."""
    from selfevolve.backends.hf import HFBackend, in_dtype
    from selfevolve.training.rl import Validation
    from selfevolve.training.saved_validation import saved_validation, validation_key

    questions, seed, config = validation_questions(ctx), ctx.seed(purpose), SolveConfig.from_params(ctx.params)
    key = validation_key(questions, config, "hf", ctx.params.model.dtype)

    def validate(model, tokenizer) -> list[int]:
        backend = HFBackend.from_pretrained_objects(in_dtype(model, ctx.params.model.dtype), tokenizer)
        return correctness(backend, questions, config, seed=seed)

    known = saved_validation(ctx.init_model(), key)
    return Validation(validate, tuple(q.form for q in questions), key=key, known_start=tuple(known) if known is not None else None)


DISTILLED_CHECK_PER_FORM = 16
"""Fresh questions of each form the cycle distilled that the SFT step's keep-or-refuse check adds to
the questions being moved (:func:`distilled_form_questions`)."""


def distilled_form_questions(ctx: StageContext, distilled: list[Rollout]) -> list[Question]:
    """:data:`DISTILLED_CHECK_PER_FORM` questions of each form this cycle's distillation picked
    (``mass/distill.json`` ``forms``; none when the file is missing), drawn by the environment
    (``arith.make_question``, seeded for the cycle) like the distillation's own, skipping any whose
    text is in a ``distilled`` row's prompt (what the step trained on), in validation or in the
    held-out set. Ids ``<cycle>-sft-check-00000`` ..., source ``environment:ladder``."""
    from selfevolve.mass.distill import LADDER_SOURCE
    from selfevolve.questions.arith import make_question

    P = ctx.paths
    if not P.mass_distill_report.exists():
        return []
    forms = [str(f) for f in json.loads(P.mass_distill_report.read_text()).get("forms") or []]
    taken = {q.text for f in (ctx.base.val, ctx.base.heldout) if f.exists() for q in read_jsonl(f, Question)}
    prompts = "\n".join(r.prompt for r in distilled)
    rng, out = ctx.rng("train_sft_distilled_forms"), []
    for form in forms:
        got = 0
        for _ in range(DISTILLED_CHECK_PER_FORM * 4):  # a form too small for fresh questions gets fewer
            q = make_question(rng, form, f"{ctx.cycle}-sft-check-{len(out):05d}", source=LADDER_SOURCE)
            if q.text not in taken and q.text not in prompts:
                taken.add(q.text)
                out.append(q)
                got += 1
            if got == DISTILLED_CHECK_PER_FORM:
                break
    return out


def sft_retention_flags(start: list[int], questions: list[Question], mastered: float) -> list[bool]:
    """Which validation questions guard retention in the SFT step's keep-or-refuse check: those of a
    seed form (``Question.split == "seed"``; every question where no split is named) that the
    starting model masters (``training.rl.retention_flags``, per form); every other question is
    being moved, the forms earlier cycles mastered included, so the step is kept when what it gains
    beyond the seed forms outweighs what it costs there (the issue's "retention of the seed forms as
    a separate guard"; Lee et al. 2025 keep every round).

    Measured (docs/measurements.md, "December 6 (continued)"): seed 0's c3 distillation moved
    validation 0.877 -> 0.910 and was refused for the forms c1 and c2 had mastered (4+5 1.00 ->
    0.85, 3+6 0.86 -> 0.71 held-out); kept, it was better on the held-out rungs (0.816 -> 0.863,
    p 3e-5; 6+6 0 -> 0.41) and the seed forms (0.986 -> 0.994)."""
    from selfevolve.training.rl import retention_flags

    seed_form = [q.split in ("seed", None) for q in questions]
    return [r and s for r, s in zip(retention_flags(start, [q.form for q in questions], mastered), seed_form)]


def _numbers(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def train_rl(ctx: StageContext) -> dict:
    """Training (``rl.algorithm``) from the cycle's starting model; the kept checkpoint (validated)
    goes to ``models/<cycle>-rl``. With ``expert_iteration`` the Solver's verified completions of
    this cycle and of every earlier one are the labelled share of each batch (a skill learned in
    cycle 1 must not be trained away in cycle 2), and so are the Solver rows every earlier cycle
    distilled from its MASS champion (``earlier_distilled.jsonl`` less the team's own turns: verified
    answers the starting model was taught in ``train_sft``); the warm start's transcripts are the
    replayed share, and the other roles' rollouts in ``rl_dataset.jsonl`` the REINFORCE++ share.
    Without the distilled rows the run trained the distilled chains away: on seed 0's c2 the
    questions being moved fell 0.293 -> 0.249 and the guard refused the run (7 of the 8 later
    cycles of three such campaigns were refused at the first rate); with them 0.293 -> 0.373, kept
    at the first rate (docs/measurements.md, "December 6 (night 2)")."""
    from selfevolve.training import rl as rl_mod
    from selfevolve.training.config import TrainConfig

    P, params = ctx.paths, ctx.params
    validate, config = validator(ctx, "train_rl"), TrainConfig.from_params(params)
    if params.rl.algorithm == "expert_iteration":
        from selfevolve.training.expert_iteration import train_expert_iteration

        from selfevolve.mass.distill import split_turns

        distilled = split_turns(read_jsonl(P.earlier_distilled, Rollout))[0]
        verified = read_jsonl(P.self_labels, Rollout) + read_jsonl(P.earlier_labels, Rollout) + distilled
        summary = train_expert_iteration(ctx.init_model(), verified, read_jsonl(ctx.base.replay, Rollout),
                                         read_jsonl(P.rl_dataset, Rollout), validate, config,
                                         P.rl_model, on_step=ctx.log_step)
    elif params.rl.algorithm == "grpo":
        summary = rl_mod.train_grpo(ctx.init_model(), read_jsonl(P.solve_set, Question), validate, config, P.rl_model)
    else:
        summary = rl_mod.train_reinforce_pp(ctx.init_model(), read_jsonl(P.rl_dataset, Rollout), validate, config, P.rl_model,
                                            on_step=ctx.log_step)
    return _numbers(summary) | {"rl_trained": int(bool(summary.get("trained")))}


def train_sft(ctx: StageContext) -> dict:
    """SFT (TRL ``SFTTrainer``) of the RL checkpoint on the MASS champion's verified runs
    (``selfevolve.mass.sft_data``), ``sft.replay_fraction`` of them replaying the warm start's transcripts and
    earlier self-labels (``training.sft.with_replay``); the result is the cycle's model
    ``models/<cycle>``. With no SFT rows the RL checkpoint is copied unchanged. When the search
    distilled its champion into Solver rows (``mass/distill.jsonl``: the team's runs on the forms
    where it beats one pass; ``selfevolve.mass.distill``), the step trains on those and the
    team's own turns together, half of each batch (the turns, of the distilled runs and of the
    champion's chats, a fixed 0.3 of it), the other half replaying the warm start's transcripts and
    the Solver's labels (``training.sft.distill_sft``: a longer run than the chats', which a new way
    of answering needs). The turns keep the team's roles: without them the chains taught under the
    Solver's prompt leaked into the part solvers' turns, and the split team that answered 0.82 of
    the c1 check fell to 0.12 at c2 (docs/measurements.md, "December 6"). Every earlier cycle's
    distilled runs and turns (``earlier_distilled.jsonl``) join this cycle's: each round replays
    every earlier round (Lee et al. 2025, sec. 3). Measured on seed 0's c2: without them c2 taught
    5+5 and lost the 6-digit forms c1 had distilled (6+3 0.45 -> 0); with c1's rows beside c2's,
    held-out rungs 0.816 against c1's 0.701 (docs/measurements.md, "December 6 (night)"). A cycle
    whose search distilled nothing (no form where the team beats one pass) has no round to replay
    them beside: it takes the champion's chats as without a distillation (its ``train_rl`` already
    drew the earlier rows among its labels). Measured at seed 0's c5 (every 10-digit form 0 for
    the team): 1,800 steps on the earlier rows alone took 1,545 s and were refused (validation
    0.964 -> 0.949; docs/measurements.md, "The distillation judged on the forms it moves").

    The SFT step is kept only if it does not lower accuracy on the questions being moved nor, by
    more than ``rl.retention_tolerance`` (or ``rl.retention_slack`` questions), on the seed forms the
    RL checkpoint masters (:func:`sft_retention_flags`; ``sft.keep_if_worse`` = false;
    ``selfevolve.training.rl.progress_kept``): otherwise ``models/<cycle>`` is the RL checkpoint and
    ``sft_kept`` is 0 (the flattened multi-agent chats of the MASS reference were refused here
    every time: they pull the Solver away from its own prompt; docs/measurements.md). The questions
    being moved are validation's (all but those mastered seed forms) and, when the cycle distilled,
    fresh ones of the forms it distilled (:func:`distilled_form_questions`): the distillation
    reaches one digit past the longest operand it met, past the validation ladder from the 9-digit
    sums on, and validation alone saw only what it cost. Measured (docs/measurements.md, "The
    distillation judged on the forms it moves"): seed 0's c4 and seed 2's c3 distillations, refused
    on validation (moving 0.926 -> 0.916 and 0.918 -> 0.912 overall), took held-out 9-digit sums
    0.39 -> 0.87 and 0.06 -> 0.68 (+129 / -6 and +163 / -2, p 4e-31 and 6e-46) for 0.024 of the
    3+4 / 4+3 / 4+4 frontier (p 0.008 and 0.004).
    """
    from selfevolve.mass.distill import split_turns
    from selfevolve.training.config import TrainConfig
    from selfevolve.training.loop import chat_rows
    from selfevolve.training.sft import distill_sft
    from selfevolve.training.sft import train_sft as _train_sft
    from selfevolve.training.sft import with_replay

    P, params = ctx.paths, ctx.params
    distilled, earlier = [], []
    if params.mass.enabled:
        distilled = read_jsonl(P.mass_distill, Rollout) if P.mass_distill.exists() else []
        earlier = read_jsonl(P.earlier_distilled, Rollout) if P.earlier_distilled.exists() and distilled else []
        distilled += earlier
    chats = [json.loads(line)["messages"] for line in P.sft_dataset.read_text().splitlines() if line.strip()]
    if distilled:
        replay = read_jsonl(ctx.base.replay, Rollout) + read_jsonl(P.earlier_labels, Rollout) + read_jsonl(P.self_labels, Rollout)
        solver_rows, turns = split_turns(distilled)
        summary = distill_sft(P.rl_model, solver_rows, replay, P.model, turns=turns + chat_rows(chats, prefix="team-turn-"),
                              lora=params.model.lora, seed=params.seed,
                              precision=TrainConfig.from_params(params).train_precision, max_length=params.model.max_model_len)
    else:
        replayed = []
        if chats and params.sft.replay_fraction > 0:
            replayed = read_jsonl(ctx.base.replay, Rollout) + read_jsonl(P.earlier_labels, Rollout)
        chats = with_replay(chats, replayed, params.sft.replay_fraction, ctx.rng("train_sft"))
        summary = _train_sft(P.rl_model, chats, P.model, params.sft, params.model.lora, seed=params.seed)
    metrics = _numbers(summary)
    metrics["sft_trained"] = int(bool(summary.get("trained")))
    metrics["sft_kept"] = metrics["sft_trained"]
    metrics["distill_rows_earlier"] = len(earlier)
    if summary.get("trained") and not params.sft.keep_if_worse:
        from selfevolve.training.rl import progress_kept, split_accuracy
        from selfevolve.training.saved_validation import save_validation, saved_validation, validation_key

        questions, seed, config = validation_questions(ctx), ctx.seed("train_sft"), SolveConfig.from_params(params)
        key = validation_key(questions, config, params.model.backend, params.model.dtype)
        checks = distilled_form_questions(ctx, distilled) if distilled else []
        n = len(questions)

        def outcome(model_dir, qs: list[Question]) -> list[int]:
            if not qs:
                return []
            with ctx.backend(model_dir) as backend:
                return correctness(backend, qs, config, seed=seed)

        saved = saved_validation(P.rl_model, key)  # train_rl's outcome of the checkpoint it kept
        before = saved + outcome(P.rl_model, checks) if saved is not None else outcome(P.rl_model, questions + checks)
        after = outcome(P.model, questions + checks)
        metrics["sft_val_before_reused"] = int(saved is not None)
        retention = sft_retention_flags(before[:n], questions, params.rl.mastered_accuracy)
        for when, outcome_ in (("before", before), ("after", after)):
            moving, kept = split_accuracy(outcome_[:n], retention)
            metrics |= {f"sft_val_accuracy_{when}": sum(outcome_[:n]) / max(1, n), f"sft_val_moving_{when}": moving}
            if kept is not None:
                metrics[f"sft_val_retention_{when}"] = kept
            if checks:
                metrics[f"sft_distilled_forms_{when}"] = sum(outcome_[n:]) / len(checks)
        metrics["sft_distilled_form_questions"] = len(checks)
        kept_step = progress_kept(before, after, retention + [False] * len(checks), params.rl.retention_tolerance,
                                  params.rl.retention_slack)
        if not kept_step:
            log.warning("SFT lowered accuracy on the questions being moved or the mastered seed forms: the cycle keeps the RL checkpoint")
            shutil.rmtree(P.model)
            shutil.copytree(P.rl_model, P.model)
            metrics["sft_kept"] = 0
        save_validation(P.model, key, (after if kept_step else before)[:n])  # the next cycle's train_rl starts from these weights
    return metrics
