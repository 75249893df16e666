"""Champion trajectories -> SFT chats: what the team did, trained into the model that runs it.

MASS (SakanaAI, reference code SakanaAI/mass, ``training/prepare_sft_data.py``) trains the student
on the champion's whole run with the orchestrator's opening prompt replaced by the bare question,
so that it learns to produce the workflow from the question alone. Two cases here:

* **The answer agent is the Solver** (its instruction is the single agent's: ``single_agent``,
  planner -> solver, a review gate): the run becomes the chat the next cycle's single Solver sees
  (the Solver template, no plan, no workflow text) with the answer agent's accepted output (the
  attempt the run's final answer was read from) as the one assistant turn. The single pass learns
  to answer as the team did (STaR's rationalization, Zelikman et al. 2022, Sec. 3.2: an answer
  found with help, trained without it). Measured on the default campaign (seed 1, c2, 116
  verified runs of the single-agent champion on frontier pool questions, 20 steps): the reference's
  chats lowered validation accuracy on the questions being moved 0.386 -> 0.353 and were refused;
  these raised it to 0.430 (docs/measurements.md).
* **Any other answer agent** (the combiner of ``split_solver_combine``, whose reply reads sums the
  single pass never wrote): every agent's turn in its own context, the workflow kept (Multiagent
  Finetuning, Subramaniam et al. 2025, arXiv 2501.05707, Sec. 2: each agent trained on its own
  outputs in the runs that succeeded), so the next cycle's team does again what worked. Measured
  (docs/measurements.md, "December 5 (night)"): the combiner's reply as the single pass's answer
  lowered validation 0.67 -> 0.23 and was refused; the whole run as one chain broke one pass
  (frontier 0.91 -> 0.43 at 1e-4); the turns in their own context left one pass where it was
  (frontier 0.915 -> 0.93) and the team at 0.985 -> 0.99 / 0.78 -> 0.80 (frontier / beyond).

Pure conversion: nothing here runs a model or a verifier; the chat template's ``{% generation %}``
markers (``selfevolve.embedded.tinymodel.CHAT_TEMPLATE``; TRL's ``assistant_only_loss``) mask the
prompt.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from selfevolve.mass.design import WorkflowDesign, compose_prompt, single_agent
from selfevolve.records import Question, Trajectory
from selfevolve.roles.parsers import parse_solver

Chat = list[dict[str, str]]


def solver_answers(design: WorkflowDesign, domain: str) -> bool:
    """Whether ``design``'s answer agent is the single agent's Solver (the same instruction), so that
    its accepted output is a whole solution the single pass can take as its own."""
    return design.agent(design.answer).instruction == single_agent(domain).agents[0].instruction


def trajectory_to_chats(traj: Trajectory, question: Question, design: WorkflowDesign) -> list[Chat]:
    """The SFT chats of one verified run of ``design`` (see the module's two cases): when the
    answer agent is the Solver (:func:`solver_answers`), one chat ``[{"role": "user", "content":
    <single agent's prompt>}, {"role": "assistant", "content": <accepted answer>}]``; the accepted
    answer is the answer agent's last output whose parsed answer is the run's ``final_answer``
    (after a gate's re-delegation, the attempt the gate accepted), else its last output. Otherwise
    one ``[user, assistant]`` chat per DAG step as it ran (the agent's user turn, its reply), in
    order; gate reviews and re-delegations stay out, and so does an answer that was not accepted.

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
    if not solver_answers(design, question.domain):
        instructions = {ag.agent_id: ag.instruction.strip() for ag in design.agents}

        def dag_step(u, a) -> bool:  # an agent's own turn from its instruction, not a gate's review or re-delegation
            return (u.role == "user" and a.role == "assistant" and u.agent_id == a.agent_id and u.agent_id in instructions
                    and u.content.startswith(instructions[u.agent_id]))

        return [[{"role": "user", "content": u.content}, {"role": "assistant", "content": a.content}]
                for u, a in zip(traj.messages, traj.messages[1:])
                if dag_step(u, a) and (a.agent_id != design.answer or a.content in accepted)]
    solver = single_agent(question.domain).agents[0]
    return [[{"role": "user", "content": compose_prompt(solver.instruction, question.text)},
             {"role": "assistant", "content": (accepted or outputs)[-1]}]]


def trajectories_to_chats(trajs: Sequence[Trajectory], questions: Sequence[Question] | Mapping[str, Question],
                          champions: Mapping[str, WorkflowDesign]) -> list[Chat]:
    """Chats for SFT, those of each trajectory in order (see :func:`trajectory_to_chats`).

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
        chats += trajectory_to_chats(t, q, champions[q.domain])
    return chats


def chats_to_records(chats: Sequence[Chat]) -> list[dict]:
    """``[{"messages": chat}]`` rows: the conversational format TRL's SFTTrainer and
    ``datasets.load_dataset("json")`` read (write them with ``records.write_jsonl``)."""
    return [{"messages": [dict(m) for m in chat]} for chat in chats]
