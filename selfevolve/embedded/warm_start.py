"""``bootstrap`` stage: build the embedded default model from nothing (no hub, no GPU).

1. Render role transcripts of all four SAGE roles from the seed set (``embedded.transcripts``).
2. Train a byte-level BPE tokenizer on them (``tinymodel.build_tokenizer``).
3. Build a small Llama from a config (``tinymodel.build_model``).
4. Warm-start it on the transcripts (completion tokens only in the loss) with the training loop
   every cycle uses (``selfevolve.training.loop.fit``): AdamW on a warm-up / stable / decay
   schedule, bfloat16 matmuls on a CPU that has them natively (``model.train_precision``).
5. ``save_pretrained`` model and tokenizer to the output directory, with ``bootstrap.json``
   (sizes, the training precision it ran in, loss curve, wall time).

Deterministic for a given ``params.seed`` (single-threaded data order, seeded init and sampling).
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from pathlib import Path
from statistics import fmean
from typing import Callable

from selfevolve.config import Params
from selfevolve.records import write_model_summary

log = logging.getLogger(__name__)


def warm_start_transcripts(params: Params, seed_questions=None) -> list[tuple[str, list[dict[str, str]]]]:
    """The (SAGE role, chat) transcripts the warm start trains on, for the configured seed set."""
    from selfevolve.embedded import transcripts
    from selfevolve.questions.seed_sets import arith_forms

    bp = params.bootstrap
    n, seed_forms = bp.transcripts, arith_forms(params)[0]
    arith = dict(seed=params.seed, forms=seed_forms, practice_share=bp.practice_share, restate=bp.restate_operands)
    if params.seeds.set == "arith":
        return transcripts.arith_transcripts(n, **arith)
    qs = [q for q in (seed_questions or []) if q.domain == "code"]
    chats = transcripts.code_transcripts(qs, n // 2, seed=params.seed) if qs else []
    return chats + transcripts.arith_transcripts(n - len(chats), **arith)


def run_bootstrap(params: Params, out_dir: str | Path, seed_questions=None,
                  probe: Callable[[object, object], dict] | None = None,
                  role_check: Callable[[object, object], dict[str, float]] | None = None) -> tuple[dict, list]:
    """Build, warm-start and save the tiny model to ``out_dir``. Returns the summary dict
    (``parameters``, ``vocab_size``, ``final_loss``, ``seconds``, ``loss_curve``, ``rounds``) and the
    training rows (``Rollout`` records: the transcripts, which later cycles replay).

    ``probe(model, tokenizer)`` measures the model's standing: ``{"frontier_pass": pass@k in [0, 1],
    "seed_accuracy": greedy accuracy on the seed forms in [0, 1] or None, "seed_forms": {form:
    accuracy} (optional)}``. When given, the warm
    start checks it after its ``bootstrap.steps`` and keeps going while the frontier is below
    ``bootstrap.min_frontier_pass`` or the seed forms below ``bootstrap.min_seed_accuracy``: up to
    ``bootstrap.extra_rounds`` more rounds of ``bootstrap.extra_steps`` steps, each re-warmed and
    decayed again (a fresh optimizer, the transcripts' next epochs), and keeps the best round: one
    that holds the seed forms first (a frontier foothold on unmastered seed forms gave cycles
    whose Challenger and Solver fail the questions they are built on: seed forms 0.79-0.86 in two
    of three measured starts), then the higher frontier pass@k. Whether a foothold on the
    frontier appears is a matter of the training trajectory (measured: three CPU kernel paths, same
    seed, frontier 0.005 / 0.030 / 0.308) and more training can lose it again (measured: a good
    foothold, pass@8 0.43, fell to 0.25 after 600 more steps), so every round is a new chance and
    none can make the kept model worse (docs/measurements.md). An extra round after a check that
    missed the seed forms spends ``bootstrap.focus_share`` of each batch on fresh Solver
    transcripts of the forms that check found failing (:func:`focus_forms`). ``summary["rounds"]``
    lists ``{round, steps, frontier_pass, seed_accuracy, seed_forms, focus, kept}`` per check.

    Then the split workflow's round (``mass.design.split_solver_combine``; :func:`split_role_rows`):
    ``bootstrap.split_steps`` more steps at ``bootstrap.split_learning_rate``, ``bootstrap.split_share``
    of each batch on its roles' transcripts, the rest on the warm start's; the model is probed
    again and that check is the kept one. Measured (docs/measurements.md, "December 5 (evening)"):
    mixed into the warm start at a fifth of its transcripts the roles stayed unlearned (the workflow
    0.01 beyond the frontier, one pass 0.19); as a round of their own on the warm-started model
    they were learned. ``role_check(model, tokenizer) -> {role: greedy accuracy in [0, 1]}``
    (:func:`split_role_check`) measures the roles on fresh role transcripts after that round; while
    one is below ``bootstrap.min_seed_accuracy`` by more than a standard error (the roles are
    seed-form work: reading, seed-form sums, a carry; :func:`_roles_ok`), up to
    ``bootstrap.extra_rounds`` more split rounds of ``bootstrap.extra_steps`` steps follow, while
    each lifts the weakest role (:func:`_roles_moved`), with ``bootstrap.focus_share`` of their
    split rows on the role-and-length cells the check found failing (:func:`weak_cells`), and the
    best split round is kept: seed forms held first, then the weakest role's
    accuracy, then the frontier pass@k. Measured (docs/measurements.md, "December 6 (evening)"):
    the same code and seed left the combiner at 0.36 on one CPU's kernel path and the split
    workflow working on another; the check makes the roles' standing a condition, not an outcome.
    Each split round's entry in ``summary["rounds"]`` has ``split_roles: True`` and its ``roles``;
    the kept one's are also ``role_<role>_accuracy`` in the summary.

    Raises ``ValueError`` if the transcripts are empty.
    """
    import torch

    from selfevolve.embedded import tinymodel
    from selfevolve.embedded.transcripts import as_rows
    from selfevolve.questions.seed_sets import arith_forms
    from selfevolve.training.loop import fit, resolve_precision
    from selfevolve.training.rl import snapshot, training_attention

    t0 = time.time()
    out_dir = Path(out_dir)
    bp = params.bootstrap
    torch.manual_seed(params.seed)
    transcripts = warm_start_transcripts(params, seed_questions)
    if not transcripts:
        raise ValueError("no warm-start transcripts: the seed set is empty")
    tok = tinymodel.build_tokenizer((m["content"] for _, c in transcripts for m in c), vocab_size=bp.vocab_size)
    model = tinymodel.build_model(tok, hidden_size=bp.hidden_size, num_layers=bp.num_layers, num_heads=bp.num_heads,
                                  intermediate_size=bp.intermediate_size, max_position_embeddings=bp.max_position_embeddings,
                                  seed=params.seed, position_encoding=bp.position_encoding)
    training_attention(model)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d, %d transcripts", n_params, len(tok), len(transcripts))
    rows = as_rows(transcripts)
    order = list(range(len(rows)))

    def train(steps: int, seed: int, desc: str, focus: dict[str, float] | None = None, split: list | None = None,
              learning_rate: float = bp.learning_rate, split_focus: dict[str, float] | None = None) -> list[dict]:
        def draw(rng):  # epochs over the transcripts in a seeded order; a share on the focus forms or the split roles
            batch = []
            for _ in range(bp.batch_size):
                if focus and rng.random() < bp.focus_share:
                    batch.append(_focus_row(rng, focus, bp.restate_operands))
                    continue
                if split and rng.random() < bp.split_share:
                    focused = split_focus and rng.random() < bp.focus_share
                    batch.append(_split_focus_row(rng, split_focus, split_forms) if focused else rng.choice(split))
                    continue
                if not order:
                    order.extend(range(len(rows)))
                if len(order) == len(rows):
                    rng.shuffle(order)
                batch.append(rows[order.pop()])
            return batch

        return fit(model, tok, draw, steps=steps, learning_rate=learning_rate, warmup_steps=min(50, steps // 10),
                   decay_steps=round(steps * bp.decay_fraction), min_lr_ratio=0.01, max_length=bp.max_position_embeddings,
                   seed=seed, precision=params.model.train_precision, desc=desc)

    curve = train(bp.steps, params.seed, "bootstrap (warm start)")
    rounds: list[dict] = []
    if probe is not None:
        rounds.append({"round": 0, "steps": bp.steps, **probe(model, tok)})
        best = (_rank(rounds[0], bp), 0, snapshot(model))
        while not _good_enough(rounds[best[1]], bp) and len(rounds) <= bp.extra_rounds:
            r, focus = len(rounds), focus_forms(rounds[-1], bp)
            log.info("round %d: frontier pass@k %.3f (wanted %.3f), seed forms %s (wanted %.3f); best so far round %d: "
                     "extra round %d of %d steps%s", r - 1, rounds[-1]["frontier_pass"], bp.min_frontier_pass,
                     rounds[-1].get("seed_accuracy"), bp.min_seed_accuracy, best[1], r, bp.extra_steps,
                     f", {bp.focus_share:.0%} of it on {sorted(focus)}" if focus else "")
            last = curve[-1]["step"]
            curve += [{**e, "step": last + e["step"]}
                      for e in train(bp.extra_steps, params.seed + r, f"bootstrap (extra round {r})", focus)]
            rounds.append({"round": r, "steps": bp.extra_steps, "focus": sorted(focus), **probe(model, tok)})
            if _rank(rounds[-1], bp) > best[0]:
                best = (_rank(rounds[-1], bp), r, snapshot(model))
        _keep_best(model, rounds, best)
    split_rows, kept_roles = split_role_rows(params), {}
    split_forms = arith_forms(params)[0] if split_rows else []  # what the focused split rows are drawn over
    if split_rows:
        for entry in rounds:
            entry["kept"] = False
        first, best, weak = len(rounds), None, {}
        while True:
            r, steps = len(rounds), bp.split_steps if len(rounds) == first else bp.extra_steps
            last = curve[-1]["step"]
            desc = "bootstrap (the split workflow's roles)" + (f", extra round {r - first}" if r > first else "")
            curve += [{**e, "step": last + e["step"]} for e in train(steps, params.seed + r + 1, desc, split=split_rows,
                                                                    learning_rate=bp.split_learning_rate, split_focus=weak)]
            if probe is None and role_check is None:
                break
            entry = {"round": r, "steps": steps, "split_roles": True, **(probe(model, tok) if probe else {})}
            if weak:
                entry["focus"] = sorted(weak)
            if role_check is not None:
                entry["roles"] = dict(role_check(model, tok))
                entry["role_cells"] = entry["roles"].pop("cells", {})
            rounds.append(entry)
            weak = weak_cells(entry, bp)
            before = best
            if best is None or _split_rank(entry, bp) > best[0]:
                best = (_split_rank(entry, bp), r, snapshot(model))
            if _roles_ok(entry, bp) or r - first >= bp.extra_rounds:
                break
            if before is not None and not _roles_moved(entry, rounds[before[1]], bp):
                log.info("split workflow's roles %s: the weakest no better than round %d's %s; no more split rounds",
                         entry["roles"], before[1], rounds[before[1]]["roles"])
                break
            log.info("split workflow's roles %s (wanted %.3f each): extra split round %d of %d steps%s", entry["roles"],
                     bp.min_seed_accuracy, r + 1 - first, bp.extra_steps,
                     f", {bp.focus_share:.0%} of its split rows on {weak}" if weak else "")
        if best is not None:
            _keep_best(model, rounds[first:], best)
            kept_roles = {f"role_{k}_accuracy": v for k, v in rounds[best[1]].get("roles", {}).items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    every = max(1, len(curve) // 50)
    summary = {
        "parameters": n_params,
        "vocab_size": len(tok),
        "transcripts": len(transcripts),
        "train_precision": resolve_precision(params.model.train_precision),
        "steps": len(curve),
        "extra_rounds": max(0, sum(not r.get("split_roles") for r in rounds) - 1),
        "split_rounds": sum(bool(r.get("split_roles")) for r in rounds),
        **kept_roles,
        "rounds": rounds,
        "final_loss": fmean(r["loss"] for r in curve[-every:]) if curve else None,
        "loss_curve": [r for r in curve if r["step"] % every == 0],
        "seconds": round(time.time() - t0, 2),
    }
    write_model_summary(out_dir / "bootstrap.json", summary)
    return summary, rows + split_rows


def split_role_rows(params: Params) -> list:
    """The transcripts of the split workflow's round (``transcripts.split_transcript``): as many as
    that round draws (``bootstrap.split_steps`` x ``batch_size`` x ``split_share``), deterministic for
    the seed; none for a seed set other than arith or with ``split_steps`` 0. They join the warm
    start's rows, so later cycles replay them with the rest."""
    from selfevolve.embedded.transcripts import as_rows, split_transcript
    from selfevolve.questions.seed_sets import arith_forms

    bp = params.bootstrap
    if not _split_round_on(params):
        return []
    rng, forms = random.Random(f"split-roles:{params.seed}"), arith_forms(params)[0]
    n = max(1, round(bp.split_steps * bp.batch_size * bp.split_share))
    return as_rows([split_transcript(rng, forms) for _ in range(n)], prefix="split")


def split_role_check(params: Params) -> Callable[[object, object], dict] | None:
    """``check(model, tokenizer) -> {role: accuracy in [0, 1], ..., "cells": {cell: accuracy}}`` for
    each role of :data:`~selfevolve.embedded.transcripts.SPLIT_ROLES`: greedy replies to
    ``bootstrap.probe_questions`` fresh transcripts of that role (``transcripts.split_transcript``,
    drawn once from their own seed, so checking takes nothing from training's randomness), right
    when what follows the reply's ``</think>`` (the splitter's ``<low>..</low><high>..</high>``, the
    combiner's ``<answer>``) is the transcript's, character for character; that is
    what the workflow (``mass.design.split_solver_combine``) reads from each role. ``cells``: the
    same by :func:`split_cell` (role and length), for cells of at least :data:`MIN_CELL`
    transcripts. None where :func:`split_role_rows` is empty or ``bootstrap.extra_rounds`` is 0."""
    from selfevolve.backends.base import SamplingConfig
    from selfevolve.embedded.transcripts import SPLIT_ROLES, split_transcript
    from selfevolve.questions.seed_sets import arith_forms

    if not _split_round_on(params) or not params.bootstrap.extra_rounds:
        return None
    rng, forms = random.Random(f"split-check:{params.seed}"), arith_forms(params)[0]
    n = max(1, params.bootstrap.probe_questions)
    items = {role: [split_transcript(rng, forms, role=role)[1] for _ in range(n)] for role in SPLIT_ROLES}
    cell_of = {role: [split_cell(role, c[1]["content"]) for c in chats] for role, chats in items.items()}

    def check(model, tok) -> dict:
        from selfevolve.backends.hf import HFBackend

        backend = HFBackend.from_pretrained_objects(model, tok)
        out, cells = {}, {}
        for role, chats in items.items():
            longest = max(len(tok(c[1]["content"]).input_ids) for c in chats)
            replies = backend.chat([c[:1] for c in chats], SamplingConfig(temperature=0.0, max_new_tokens=longest + 8))
            right = [_after_think(got[0].text) == _after_think(c[1]["content"]) for got, c in zip(replies, chats)]
            out[role] = round(fmean(right), 4)
            by_cell: dict[str, list[bool]] = {}
            for cell, ok in zip(cell_of[role], right):
                by_cell.setdefault(cell, []).append(ok)
            cells.update({cell: round(fmean(hits), 4) for cell, hits in sorted(by_cell.items()) if len(hits) >= MIN_CELL})
        return {**out, "cells": cells}

    return check


#: Fewest check transcripts a cell (:func:`split_cell`) needs to be scored and focused on.
MIN_CELL = 10


def split_cell(role: str, reply: str) -> str:
    """Where a split role's transcript falls: its role and the length of the longest number after
    its worked steps (the combiner's answer digits, the splitter's high part): ``"combiner 7"``."""
    return f"{role} {max((len(d) for d in re.findall(r'[0-9]+', _after_think(reply))), default=0)}"


def weak_cells(entry: dict, bp) -> dict[str, float]:
    """The cells an extra split round focuses on, with their weights: each of the checked round's
    ``role_cells`` (cell -> accuracy) below ``bootstrap.min_seed_accuracy``, weighted by its error
    rate. Measured (docs/measurements.md, "December 7 (night)"): seed 0's combiner at 0.79 was right
    on every answer length but one, 7 digits (a 4-digit high sum; 1 of 86); 600 steps with 0.3 of
    the split rows on 7-digit answers took it to 1.00 and the combiner to 0.97, the same steps
    without to 0.82 (four such rounds of the campaign: 0.78, 0.775, 0.785, 0.79)."""
    return {c: round(1.0 - a, 4) for c, a in sorted(entry.get("role_cells", {}).items()) if a < bp.min_seed_accuracy}


def _split_focus_row(rng, cells: dict[str, float], forms: list[str]):
    """One split-role training row of a cell drawn by weight from ``cells`` (:func:`weak_cells`):
    transcripts of its role over the seed ``forms`` are drawn until one falls in it (up to 1,000;
    else the last drawn)."""
    from selfevolve.embedded.transcripts import as_rows, split_transcript

    cell = rng.choices(list(cells), weights=list(cells.values()))[0]
    role = cell.split()[0]
    for _ in range(1000):
        chat = split_transcript(rng, forms, role=role)
        if split_cell(role, chat[1][1]["content"]) == cell:
            break
    return as_rows([chat], prefix="focus")[0]


def _split_round_on(params: Params) -> bool:
    """Whether the warm start has a split round: an arith seed set, ``split_steps`` and ``split_share`` set."""
    bp = params.bootstrap
    return params.seeds.set == "arith" and bool(bp.split_steps) and bool(bp.split_share)


def _keep_best(model, entries: list[dict], best: tuple) -> None:
    """Load the weights of ``best`` (``(rank, round, state dict)``) unless its round is the last of
    ``entries`` (the model's current weights), and mark which of ``entries`` is kept."""
    if best[1] != entries[-1]["round"]:
        model.load_state_dict(best[2])
    for entry in entries:
        entry["kept"] = entry["round"] == best[1]


def _after_think(text: str) -> str:
    """What a role's reply says after its worked steps (its last ``</think>``), stripped."""
    return text.rpartition("</think>")[2].strip()


def _role_se(bp) -> float:
    """One standard error of a role's accuracy at ``bootstrap.min_seed_accuracy`` on the check's
    ``bootstrap.probe_questions`` transcripts (0.0154 for 0.95 on 200)."""
    m = bp.min_seed_accuracy
    return math.sqrt(m * (1 - m) / max(1, bp.probe_questions))


def _roles_ok(entry: dict, bp) -> bool:
    """Whether no role of the split round is below ``bootstrap.min_seed_accuracy`` by more than
    :func:`_role_se` (0.95 on 200: a floor of 0.935). On 50 transcripts a role that stood at 0.95
    read 0.90-0.98 from round to round, and seed 1 trained three extra split rounds on that noise
    (docs/measurements.md)."""
    return all(a >= bp.min_seed_accuracy - _role_se(bp) for a in entry.get("roles", {}).values())


def _roles_moved(entry: dict, before: dict, bp) -> bool:
    """Whether an extra split round lifted the weakest role above the best earlier round's weakest
    by more than :func:`_role_se`; one that did not ends the split rounds. Measured (seed 0, this
    commit's fresh ``make run``, docs/measurements.md "December 7 (night)"): a combiner at 0.78
    after the first round read 0.78, 0.775, 0.785, 0.79 after four more rounds of 600 steps
    (10 minutes of the warm start's 21)."""
    weakest = min(entry.get("roles", {}).values(), default=0.0)
    return weakest > min(before.get("roles", {}).values(), default=0.0) + _role_se(bp)


def _split_rank(entry: dict, bp) -> tuple:
    """Order of the split rounds: one that holds the seed forms first, then its weakest role, then the frontier."""
    return (_seed_ok(entry, bp), min(entry.get("roles", {}).values(), default=0.0), entry.get("frontier_pass", 0.0))


def focus_forms(entry: dict, bp) -> dict[str, float]:
    """The seed forms an extra round focuses on, with their weights: when the probed round
    ``entry`` misses ``bootstrap.min_seed_accuracy`` overall, each seed form whose own greedy
    accuracy (``entry["seed_forms"]``: form -> accuracy in [0, 1]) is below it, weighted by its
    error rate (1 - accuracy); ``{}`` otherwise (a round that holds the seed forms trains on the
    transcripts alone, as before). Measured on a warm start that read the first operand a column
    off whenever the second was padded (seed forms 0.73; 3+2, 4+1, 5+2 at 0.00-0.07): 600 steps
    with half of each batch on those forms moved it to 0.96, the same steps on the transcripts
    alone left it at 0.73 (docs/measurements.md, December 3)."""
    if _seed_ok(entry, bp):
        return {}
    return {f: 1.0 - a for f, a in sorted((entry.get("seed_forms") or {}).items()) if a < bp.min_seed_accuracy}


def _focus_row(rng, focus: dict[str, float], restate: bool = False):
    """One Solver training row on a fresh question of a focus form (drawn by weight)."""
    from selfevolve.embedded.transcripts import as_rows, solver_transcript
    from selfevolve.questions import arith

    form = rng.choices(list(focus), weights=list(focus.values()))[0]
    return as_rows([solver_transcript(rng, arith.make_question(rng, form, "focus", restate=restate))], prefix="focus")[0]


def _seed_ok(entry: dict, bp) -> bool:
    return entry.get("seed_accuracy") is None or entry["seed_accuracy"] >= bp.min_seed_accuracy


def _good_enough(entry: dict, bp) -> bool:
    return entry["frontier_pass"] >= bp.min_frontier_pass and _seed_ok(entry, bp)


def _rank(entry: dict, bp) -> tuple:
    """Order of the warm start's rounds: one that holds the seed forms (``bootstrap.min_seed_accuracy``)
    beats one that does not, then the higher frontier pass@k, then the higher seed-form accuracy."""
    return (_seed_ok(entry, bp), entry["frontier_pass"], entry.get("seed_accuracy") or 0.0)
