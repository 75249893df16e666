"""Champion trajectories -> SFT chats (MASS: the student learns to orchestrate).

As in the reference (SakanaAI/mass ``training/prepare_sft_data.py``): each kept run of the champion
(``selfevolve.mass.trajectories``) becomes training text in which the orchestrator's opening prompt
is replaced by the *bare question* (so the student learns to produce the whole workflow from the
question alone), worker prompts stay as they were, and every non-assistant turn (system, user,
tool) is masked from the loss. Pure conversion: nothing here runs a model or a verifier.

A trajectory becomes one chat: its messages in the order they happened (``user`` turns carry the
prompts each agent was given, ``assistant`` turns the completions). The chat template with
``{% generation %}`` markers (``selfevolve.embedded.tinymodel.CHAT_TEMPLATE``; TRL's ``assistant_only_loss``)
masks the non-assistant turns; ``selfevolve.training.sft.assistant_token_mask`` shows the mask.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from selfevolve.records import Question, Trajectory

Chat = list[dict[str, str]]


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
