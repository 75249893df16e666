"""Champion trajectories -> SFT chats (MASS: the student learns to orchestrate).

As in the reference (SakanaAI/mass ``training/prepare_sft_data.py``): run the champion design many
times per question, keep completed runs, and turn each run into training text in which the
orchestrator's opening prompt is replaced by the *bare question* (so the student learns to produce
the whole workflow from the question alone), worker prompts stay as they were, and every
non-assistant turn (system, user, tool) is masked from the loss. Where the reference ranks the kept
runs by pairwise self-judgement, we have verifiers: a run is kept when it completed *and* the
verifier accepted its final answer.

A trajectory becomes one chat: its messages in the order they happened (``user`` turns carry the
prompts each agent was given, ``assistant`` turns the completions). The chat template with
``{% generation %}`` markers (``selfevolve.embedded.tinymodel.CHAT_TEMPLATE``; TRL's ``assistant_only_loss``)
masks the non-assistant turns; ``selfevolve.training.sft.assistant_token_mask`` shows the mask.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from selfevolve.backends.base import Backend, SamplingConfig
from selfevolve.mass.design import DesignLimits, WorkflowDesign
from selfevolve.mass.executor import run_design
from selfevolve.mass.fitness import verify_trajectories
from selfevolve.verifiers.grading import VerifyFn
from selfevolve.records import Question, Trajectory

Chat = list[dict[str, str]]


def collect_champion_trajectories(backend: Backend, champions: Mapping[str, WorkflowDesign], questions: Sequence[Question],
                                  verify_fn: VerifyFn | None, *, samples: int = 2,
                                  limits: DesignLimits | Mapping[str, DesignLimits] | None = None,
                                  sampling: SamplingConfig | None = None, seed: int | None = 0) -> list[Trajectory]:
    """Run each domain's champion ``samples`` times (``MassParams.trajectories_per_question``) on that
    domain's questions and verify the final answers (``traj.correct`` set; ``None`` when the
    verifier cannot decide). Questions of a domain without a champion are skipped.

    Returns every trajectory, question-major per domain (filter with :func:`select_for_sft`).
    ``limits``: one ``DesignLimits`` or domain -> limits (``SearchResult.limits``). Sampling defaults
    to temperature 1.0 so the samples differ. The champion passed the guardrails during the search;
    here only the run-time limits apply (questions may be longer than the search's sample)."""
    out: list[Trajectory] = []
    for domain in sorted(champions):
        qs = [q for q in questions if q.domain == domain]
        if not qs:
            continue
        lim = limits.get(domain) if isinstance(limits, Mapping) else limits
        lim = lim or DesignLimits()
        cfg = sampling or SamplingConfig(temperature=1.0, max_new_tokens=lim.max_new_tokens)
        res = run_design(backend, champions[domain], qs, limits=lim, sampling=cfg, samples=samples, seed=seed,
                         check_limits=False)
        expanded = [q for q in qs for _ in range(samples)]
        verify_trajectories(res.trajectories, expanded, verify_fn)
        out += res.trajectories
    return out


def select_for_sft(trajs: Sequence[Trajectory], min_correct: float = 1.0) -> list[Trajectory]:
    """Completed runs whose verified score is at least ``min_correct`` (unverified runs are dropped)."""
    return [t for t in trajs if t.completed and t.correct is not None and t.correct >= min_correct]


def trajectory_to_chat(traj: Trajectory, question: Question) -> Chat:
    """One trajectory as a chat ``[{"role", "content"}, ...]`` (messages in order). The first user
    turn (the orchestrator's opening prompt) becomes ``question.text``; later turns are unchanged.
    Raises ``ValueError`` if the trajectory has no assistant turn or belongs to another question."""
    if traj.question_id != question.id:
        raise ValueError(f"trajectory {traj.id} is for question {traj.question_id!r}, not {question.id!r}")
    chat: Chat = []
    replaced = False
    for m in traj.messages:
        content = m.content
        if m.role == "user" and not replaced:
            content, replaced = question.text, True
        chat.append({"role": m.role, "content": content})
    if not any(m["role"] == "assistant" for m in chat):
        raise ValueError(f"trajectory {traj.id} has no assistant turn to train on")
    return chat


def trajectories_to_chats(trajs: Sequence[Trajectory], questions: Sequence[Question] | Mapping[str, Question]) -> list[Chat]:
    """Chats for SFT, one per trajectory, in order (see :func:`trajectory_to_chat`).

    ``questions``: the questions the trajectories ran on (list or id -> Question). Raises
    ``KeyError`` naming a trajectory whose question is missing."""
    by_id = dict(questions) if isinstance(questions, Mapping) else {q.id: q for q in questions}
    chats = []
    for t in trajs:
        if t.question_id not in by_id:
            raise KeyError(f"trajectory {t.id}: question {t.question_id!r} is not among the {len(by_id)} questions given")
        chats.append(trajectory_to_chat(t, by_id[t.question_id]))
    return chats


def chats_to_records(chats: Sequence[Chat]) -> list[dict]:
    """``[{"messages": chat}]`` rows: the conversational format TRL's SFTTrainer and
    ``datasets.load_dataset("json")`` read (write them with ``records.write_jsonl``)."""
    return [{"messages": [dict(m) for m in chat]} for chat in chats]
