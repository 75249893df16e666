"""The champion's reach, distilled into the single pass: where the team answers what one pass cannot.

MASS (SakanaAI/mass, reference code ``training/prepare_sft_data.py``) fine-tunes the model on the
best workflow's runs with the workflow removed from the prompt, so that the single model learns to
do what the team did and starts the next round where the team stood. SECToR (Zhang et al. 2023,
arXiv 2309.08589, Sec. 3) does it for addition: sums the model solves only by decomposing them
are solved that way, checked, and trained back as plain answers. Here:

1. **Where.** The environment draws questions over the ladder's forms beyond the seed forms,
   operands up to one digit longer than the longest the cycle's pool or an earlier cycle's
   distillation holds (:func:`ladder_forms`; fresh operands, exact answers for the verifier
   only): a few of each form first, which one pass and the champion both answer greedily (at the
   budget held-out answers get, ``evaluation.max_new_tokens``: at the agents' 256 one pass's
   8-digit chains were cut off and it looked unable where it was not); a form
   is picked when the champion's accuracy on it beats one pass's by at least
   ``DISTILL_MARGIN`` and one pass answers it at most ``MAX_ONE_PASS`` of the time
   (:func:`forms_to_distill`), and most of the rest of the questions go to the picked forms, for
   the champion (:func:`distill`). Elsewhere the single pass keeps its own format.
2. **What.** Each verified champion run on those forms becomes one Solver reply
   (:func:`chain_reply`): under the single agent's prompt, every agent's reasoning in the order it
   ran, each after the agent's id, then the run's verified answer, e.g.
   ``<think>splitter 004050+000542 <low>050 + 542</low><high>004 + 000</high> low 050+542 ...
   high 004+000 ... combiner low 0592 carry 0 rest 592 high 4+0=4 join 4 592</think>
   <answer>4592</answer>``. The leading agent id marks the team's way from the first token, so the
   model can choose it by the question's form.
3. **How.** Beside the team's rows, one pass's own verified replies on the ladder forms it already
   answers (``ANCHOR_ACCURACY``) keep its way where it works, and each chained run's agents' own
   turns (:data:`TEAM_TURN`) keep the team's roles, which share the model; the ``train_sft`` stage
   trains on all of them with replay (``selfevolve.training.sft.distill_sft``, the turns at their
   own share) and keeps the result only if validation does not fall.

Measured (docs/measurements.md, "December 6"; a throwaway run over the library from the c4 model of
seed 0's ``bench_compound``): 2,325 verified team runs on 5+4 ... 6+6 distilled with replay and the
model's own answers on the forms it does: one pass, greedy, 60 questions a form, 5+5 0.23 -> 0.88,
6+3 0.00 -> 0.78, 6+5 0.00 -> 0.60, 6+6 0.00 -> 0.38, seed forms 1.00 -> 1.00, 4+3 1.00 -> 0.97; the
team's way on every question of the distilled forms and on none of the others. 115-600 chains
without the marker (December 5) broke one pass instead. In the stages, from that c4: held-out
unsupervised rungs 0.621 -> 0.808, reach 9 -> 11. At a campaign's c1 the chains are written with
wrong copies (the chained forms stay at 0) and the gain is one pass's own replies (frontier 0.828 ->
0.966); chaining forms one pass was half learning was refused there (hence ``MAX_ONE_PASS``).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from typing import Sequence

from selfevolve.backends.base import Backend
from selfevolve.mass.design import DesignLimits, WorkflowDesign, compose_prompt, single_agent
from selfevolve.mass.sft_data import trajectory_to_chats
from selfevolve.records import DISTILL_SOURCE, Question, Rollout, Trajectory
from selfevolve.verifiers.grading import VerifyFn

#: A form is distilled when the champion's greedy accuracy on it beats one pass's by this much ...
DISTILL_MARGIN = 0.2
#: ... and one pass answers it at most this often: a form one pass is learning keeps its own way.
MAX_ONE_PASS = 0.2
#: Questions of each ladder form that one pass and the champion both answer before the forms are picked.
PROBE_PER_FORM = 8
#: A form not picked keeps one pass's own way when one pass answers it at least this often ...
ANCHOR_ACCURACY = 0.2
#: ... and the questions after the probes go this share to the picked forms (the champion), the rest to those.
TEAM_SHARE = 0.6
#: The ladder reaches this many digits past the longest operand the pool or an earlier distillation holds.
LADDER_BEYOND = 1
#: ``Question.source`` of the questions the environment draws for :func:`distill`.
LADDER_SOURCE = "environment:ladder"
#: ``detail.by`` of the rows that are a verified champion run's agents' own turns, each in its own context.
TEAM_TURN = "team_turn"

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_TAGS = re.compile(r"<(?!think\b|answer\b)(\w+)>.*?</\1>", re.S)


def chain_reply(traj: Trajectory) -> str | None:
    """One verified workflow run as a single Solver reply (see the module docstring): for each
    agent turn in order, the agent's id, its ``<think>`` content (or its reply without answer tags)
    and any other tagged parts it wrote (``<low>..</low>``), inside one ``<think>``; the run's final
    answer in ``<answer>``. None when the run was not verified right or has no final answer. Pure
    text work: never raises on what a model wrote."""
    if not traj.correct or traj.final_answer is None:
        return None
    parts = []
    for m in traj.messages:
        if m.role != "assistant":
            continue
        think = _THINK.search(m.content)
        body = think.group(1).strip() if think else re.sub(r"<answer>.*?(</answer>|$)", "", m.content, flags=re.S).strip()
        tags = "".join(t.group(0) for t in _TAGS.finditer(_THINK.sub("", m.content)))  # those in <think> are in body
        parts.append(" ".join(p for p in (m.agent_id, body, tags) if p))
    return f"<think>{' '.join(parts)}</think><answer>{traj.final_answer}</answer>" if parts else None


def split_turns(rows: Sequence[Rollout]) -> tuple[list[Rollout], list[Rollout]]:
    """``(solver_rows, turns)``: distilled rows (:func:`distill`'s, or a cycle's
    ``earlier_distilled.jsonl``) split into those under the single agent's prompt (``detail.by``
    ``"team"`` or ``"one_pass"``: what one pass learns to answer) and the team's own turns
    (:data:`TEAM_TURN`: what keeps the team's roles), order kept."""
    return [r for r in rows if r.detail.get("by") != TEAM_TURN], [r for r in rows if r.detail.get("by") == TEAM_TURN]


def ladder_forms(pool: Sequence[Question], seed_forms: Sequence[str], min_short: int = 1, reached: Sequence[str] = (),
                 beyond: int = LADDER_BEYOND) -> list[str]:
    """The ladder's two-operand forms (``arith.frontier_forms``: the shorter operand at least
    ``min_short`` digits, the seed forms' operators) up to ``beyond`` digits past the longest operand
    among the ``pool``'s forms and the forms ``reached`` (those earlier cycles distilled), at most
    ``arith.MAX_DIGITS``, less the ``seed_forms``: for the embedded default and a pool reaching 5
    digits, 4+3, 3+4, 4+4, 5+3 ... 5+5, 6+1, 1+6, 6+2 ... 6+6. The short partners (``min_short`` 1)
    are there because the split team's parts are such sums: a 9+3 or 9+4 sum's high part is a
    6-digit number plus 0, which one pass had never met (one pass 0.12 on 6+1 at seed 2's c2, the
    team 0 and 0.12 on 9+3 / 9+4 while 0.88-1.00 on 9+5 ... 9+8; docs/measurements.md, "Past c2").
    Each round labels questions one digit longer than the last (Lee et al. 2025, arXiv 2502.01612,
    sec. 3): without it the ladder stopped where the Challenger's questions in the pool stopped (7
    digits), the team's 8-digit runs were never asked for, and one pass stayed at 0 on every
    8-digit rung from c1 to c6 (docs/measurements.md, "December 7"). Empty when neither holds a parseable form."""
    from selfevolve.questions.arith import MAX_DIGITS, frontier_forms, parse_form

    top, ops, seed = 0, sorted({parse_form(f)[0] for f in seed_forms}), set(seed_forms)
    for form in [q.form for q in pool] + list(reached):
        try:
            top = max(top, *parse_form(form)[1]) if form else top
        except ValueError:
            continue
    top = min(MAX_DIGITS, top + beyond) if top else 0
    return [f for op in ops for lv in range(min_short, top + 1) for f in frontier_forms(lv, min_short, op) if f not in seed]


def forms_to_distill(questions: Sequence[Question], team: Sequence[int], one_pass: Sequence[int],
                     margin: float = DISTILL_MARGIN, max_one_pass: float = MAX_ONE_PASS) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The forms whose team accuracy beats one pass's by at least ``margin`` and whose one-pass
    accuracy is at most ``max_one_pass`` (both 0/1 per question, aligned with ``questions``), and per
    form ``{"n", "team", "one_pass"}``. Measured (docs/measurements.md, "December 6"): the team's way
    taught on forms one pass was half learning (c1's 3+4 / 4+4 / 5+3, c4's 4+5 / 5+4) lowered them
    and was refused at c1; on forms one pass never answers it was all gain."""
    by_form: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for q, t, o in zip(questions, team, one_pass):
        if q.form:
            by_form[q.form].append((t, o))
    stats = {f: {"n": len(v), "team": sum(t for t, _ in v) / len(v), "one_pass": sum(o for _, o in v) / len(v)}
             for f, v in sorted(by_form.items())}
    return [f for f, s in stats.items() if s["team"] - s["one_pass"] >= margin and s["one_pass"] <= max_one_pass], stats


def empty_report(probe_per_form: int = 0) -> dict:
    """The report of a distillation that made no rows (no team, no forms, or MASS off): the keys
    :func:`distill` returns, every count 0 (``team``: the design probed, set by the stage)."""
    return {"questions": 0, "probe_per_form": probe_per_form, "forms": [], "kept_forms": [], "by_form": {}, "team_rows": 0,
            "team_turn_rows": 0, "one_pass_rows": 0, "team": None, "team_is_champion": False}


def distill(backend: Backend, champion: WorkflowDesign | None, forms: Sequence[str], rng: random.Random, n: int, *, prefix: str,
            verify_fn: VerifyFn, limits: DesignLimits, seed: int = 0,
            probe: int = PROBE_PER_FORM) -> tuple[list[Rollout], dict]:
    """Solver rows that carry the champion's reach into the single pass (see the module docstring).

    ``n`` questions in all, drawn by the environment (``arith.make_question`` from ``rng``; ids
    ``<prefix>00000`` ..., source :data:`LADDER_SOURCE`): first ``probe`` of each of ``forms`` (fewer
    when ``n`` is short), which one pass and the champion both answer greedily; :func:`forms_to_distill`
    picks the forms the champion wins, and the forms one pass answers at least
    ``ANCHOR_ACCURACY`` of the time are kept in its own way. The rest of the questions go
    :data:`TEAM_SHARE` to the picked forms, for the champion, and the others to the kept forms, for
    one pass. Rows (``detail.source`` :data:`~selfevolve.records.DISTILL_SOURCE`, ``detail.form``,
    ``detail.by`` ``"team"``, :data:`TEAM_TURN` or ``"one_pass"``): every verified champion run on a
    picked form as one Solver reply (:func:`chain_reply`) and as its agents' own turns
    (``selfevolve.mass.sft_data.trajectory_to_chats``), and every verified one-pass reply on a kept
    form. Returns ``(rows, report)``, the report ``{"questions", "probe_per_form", "forms",
    "kept_forms", "by_form", "team_rows", "team_turn_rows", "one_pass_rows"}``. No champion (None),
    a champion that is the single agent, no forms, ``n`` = 0 or no form picked: no rows (all but the
    last without a model call)."""
    from selfevolve.mass.fitness import greedy_runs
    from selfevolve.questions.arith import make_question

    one = single_agent(champion.domain if champion else "math")
    per_form = min(probe, n // max(1, len(forms)))
    report = empty_report(per_form)
    if champion is None or not forms or per_form == 0 or champion.design_id == one.design_id:
        return [], report

    def ask(questions: list[Question], design: WorkflowDesign) -> list[Trajectory]:
        return greedy_runs(backend, design, questions, verify_fn=verify_fn, limits=limits, seed=seed)[1]

    def draw(among: list[str], k: int, start: int) -> list[Question]:
        return [make_question(rng, rng.choice(among), f"{prefix}{start + i:05d}", source=LADDER_SOURCE) for i in range(k)]

    probes = [make_question(rng, f, f"{prefix}{i * per_form + j:05d}", source=LADDER_SOURCE)
              for i, f in enumerate(forms) for j in range(per_form)]
    team, alone = ask(probes, champion), ask(probes, one)
    picked, stats = forms_to_distill(probes, [int(bool(t.correct)) for t in team], [int(bool(t.correct)) for t in alone])
    kept = [f for f in forms if f not in picked and stats.get(f, {}).get("one_pass", 0.0) >= ANCHOR_ACCURACY]
    report.update(questions=len(probes), forms=picked, kept_forms=kept, by_form=stats)
    if not picked:
        return [], report
    rest = n - len(probes)
    n_team = rest if not kept else round(rest * TEAM_SHARE)
    more_team = draw(picked, n_team, len(probes))
    more_alone = draw(kept, rest - n_team, len(probes) + n_team) if kept else []
    report["questions"] += len(more_team) + len(more_alone)
    instruction = one.agents[0].instruction
    rows = []

    def row(q: Question, rid: str, prompt: str, completion: str, by: str) -> Rollout:
        return Rollout(id=rid, role="solver", group=q.id, question_id=q.id, prompt=prompt, completion=completion, reward=1.0,
                       detail={"source": DISTILL_SOURCE, "form": q.form, "by": by, "design": champion.design_id})

    for q, t, by in ([(q, t, "team") for q, t in zip(probes + more_team, team + ask(more_team, champion)) if q.form in picked]
                     + [(q, t, "one_pass") for q, t in zip(probes + more_alone, alone + ask(more_alone, one)) if q.form in kept]):
        replies = [m.content for m in t.messages if m.role == "assistant"]
        reply = chain_reply(t) if by == "team" else (replies[-1] if t.correct and replies else None)
        if reply:
            rows.append(row(q, f"distill-{q.id}", compose_prompt(instruction, q.text), reply, by))
            if by == "team":  # the same run as each agent's own turns: the team keeps its roles (TEAM_TURN)
                rows += [row(q, f"distill-{q.id}-turn{k}", chat[0]["content"], chat[1]["content"], TEAM_TURN)
                         for k, chat in enumerate(trajectory_to_chats(t, q, champion))]
    for by in ("team", TEAM_TURN, "one_pass"):
        report[f"{by}_rows"] = sum(r.detail["by"] == by for r in rows)
    return rows, report
