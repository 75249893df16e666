"""Champion trajectories -> SFT chats: the team's verified answers distilled into the single pass.

MASS (SakanaAI, reference code SakanaAI/mass, ``training/prepare_sft_data.py``) trains the student
on the champion's whole run with the orchestrator's opening prompt replaced by the bare question,
so that it learns to produce the workflow from the question alone. Our next cycle's model is run
and judged as one Solver (its held-out accuracy, its Solver rollouts), so each kept run becomes the
chat that Solver sees: the single agent's prompt for the question (``design.single_agent``:
the Solver template, no plan, no workflow text) and, as the one assistant turn, the answer
agent's accepted output (the attempt the run's final answer was read from). The single pass
learns to answer as the team did (STaR's rationalization, Zelikman et al. 2022, Sec. 3.2: an
answer found with help, trained without it). Measured on the default campaign (seed 1, c2,
116 verified runs of the single-agent champion on frontier pool questions, 20 steps): the
reference's chats lowered validation accuracy on the questions being moved 0.386 -> 0.353 and
were refused; these raised it to 0.430 (docs/measurements.md). Pure conversion: nothing here runs
a model or a verifier; the chat template's ``{% generation %}`` markers
(``selfevolve.embedded.tinymodel.CHAT_TEMPLATE``; TRL's ``assistant_only_loss``) mask the prompt.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from selfevolve.mass.design import WorkflowDesign, compose_prompt, single_agent
from selfevolve.records import Question, Trajectory
from selfevolve.roles.parsers import parse_solver

Chat = list[dict[str, str]]


def trajectory_to_chat(traj: Trajectory, question: Question, design: WorkflowDesign) -> Chat:
    """One run of ``design`` as ``[{"role": "user", "content": <single agent's prompt>},
    {"role": "assistant", "content": <accepted answer>}]``. The accepted answer is the answer
    agent's last output whose parsed answer is the run's ``final_answer`` (after a gate's
    re-delegation, the attempt the gate accepted), else its last output.

    Raises ``ValueError`` if the trajectory belongs to another question or design, or its answer
    agent never answered."""
    if traj.question_id != question.id:
        raise ValueError(f"trajectory {traj.id} is for question {traj.question_id!r}, not {question.id!r}")
    if traj.design_id != design.design_id:
        raise ValueError(f"trajectory {traj.id} ran design {traj.design_id}, not {design.design_id}")
    outputs = [m.content for m in traj.messages if m.role == "assistant" and m.agent_id == design.answer]
    if not outputs:
        raise ValueError(f"trajectory {traj.id} has no output of its answer agent {design.answer!r} to train on")
    accepted = [o for o in outputs if traj.final_answer is not None and parse_solver(o, question.domain).answer == traj.final_answer]
    solver = single_agent(question.domain).agents[0]
    return [{"role": "user", "content": compose_prompt(solver.instruction, question.text)},
            {"role": "assistant", "content": (accepted or outputs)[-1]}]


def trajectories_to_chats(trajs: Sequence[Trajectory], questions: Sequence[Question] | Mapping[str, Question],
                          champions: Mapping[str, WorkflowDesign]) -> list[Chat]:
    """Chats for SFT, one per trajectory, in order (see :func:`trajectory_to_chat`).

    ``questions``: the questions the trajectories ran on (list or id -> Question); ``champions``:
    domain -> the design that ran them (``mass/champions.json``). Raises ``KeyError`` naming a
    trajectory whose question or domain's champion is missing."""
    by_id = dict(questions) if isinstance(questions, Mapping) else {q.id: q for q in questions}
    chats = []
    for t in trajs:
        if t.question_id not in by_id:
            raise KeyError(f"trajectory {t.id}: question {t.question_id!r} is not among the {len(by_id)} questions given")
        q = by_id[t.question_id]
        if q.domain not in champions:
            raise KeyError(f"trajectory {t.id}: no champion design for domain {q.domain!r}")
        chats.append(trajectory_to_chat(t, q, champions[q.domain]))
    return chats


def chats_to_records(chats: Sequence[Chat]) -> list[dict]:
    """``[{"messages": chat}]`` rows: the conversational format TRL's SFTTrainer and
    ``datasets.load_dataset("json")`` read (write them with ``records.write_jsonl``)."""
    return [{"messages": [dict(m) for m in chat]} for chat in chats]
