"""Run a workflow design on a batch of questions through a ``Backend``, recording trajectories.

Batching is *across questions*: every agent step (and every gate review / re-delegation round) is
one ``backend.chat`` call holding that step's conversation for all runs still active (split only
when runs have different remaining output-token budgets). With ``samples`` > 1 the orchestrator's
step asks for ``n = samples`` completions per question and the runs branch from there, so samples
differ on every backend (no reliance on per-row random streams).

Each run keeps one chat thread per agent. A DAG step's turn is :func:`design.compose_prompt`
(instruction, problem, one line per incoming edge; an edge labelled ``Problem`` sets the problem
instead: :func:`restated_problem`). Gate reviews are fresh single-turn
conversations; re-delegations continue the answer agent's thread. Every user turn and every
completion is recorded as an :class:`AgentMessage` (agent id, chat role, text; completions carry
the backend's prompt/output token counts) in a :class:`Trajectory`; the final answer is the answer
agent's accepted output parsed with ``roles.parsers.parse_solver``.

Limits are enforced at run time as well as by the guardrails (MASS reference: a conservative
context guard before every call): a call that would exceed ``max_calls``, the remaining
``max_tokens_per_run`` budget (each call's ``max_new_tokens`` is cut to what is left) or the
context window (characters / ``limits.chars_per_token``) is not made; a DAG step that cannot be made stops the run
(``completed = False``), a gate round that cannot be made just ends the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from selfevolve.backends.base import Backend, Completion, SamplingConfig
from selfevolve.mass.design import (
    PROBLEM_LABEL,
    DesignError,
    DesignLimits,
    WorkflowDesign,
    compose_prompt,
    review_prompt,
    structural_problems,
    validate_design,
)
from selfevolve.questions.arith import part_question
from selfevolve.records import AgentMessage, Question, Trajectory
from selfevolve.roles.parsers import extract_tag, parse_score, parse_solver

STOP_CALLS = "call limit"
STOP_TOKENS = "token budget"
STOP_CONTEXT = "context budget"
STOP_ERROR = "backend error"


@dataclass
class _Run:
    qi: int
    sample: int
    threads: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    log: list[AgentMessage] = field(default_factory=list)
    calls: int = 0
    out_tokens: int = 0
    stop: str | None = None
    attempts: list[str] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    accepted: int | None = None
    gate_done: bool = False


@dataclass
class ExecutionResult:
    """Outcome of :func:`run_design`. Lists are aligned, question-major: index ``i * samples + s``.

    ``trajectories``: one per (question, sample); ``stop_reasons``: why a run stopped early
    (``None`` = completed); ``calls``: backend calls per run; ``review_scores``: the gate's
    normalised scores per attempt; ``backend_calls``: ``backend.chat`` invocations in total."""

    trajectories: list[Trajectory]
    stop_reasons: list[str | None]
    calls: list[int]
    review_scores: list[list[float | None]]
    backend_calls: int


def restated_problem(question: Question, inputs: Sequence[tuple[str, str]]) -> str:
    """The problem an agent is asked: the first non-empty ``Problem``-labelled input (a sub-problem
    another agent wrote), as a question of ``question``'s domain (math: ``arith.part_question``,
    ``"042 + 767"`` -> ``"Compute 42 + 767."``; as written when it is no expression), else
    ``question.text``. Never raises on what a model wrote."""
    text = next((t for label, t in inputs if label == PROBLEM_LABEL and t.strip()), None)
    if text is None:
        return question.text
    return (part_question(text) if question.domain == "math" else None) or text.strip()


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n]


class _Executor:
    def __init__(self, backend: Backend, design: WorkflowDesign, questions: Sequence[Question], limits: DesignLimits,
                 sampling: SamplingConfig, seed: int | None):
        self.backend, self.design, self.questions = backend, design, list(questions)
        self.limits, self.sampling, self.seed = limits, sampling, seed
        self.backend_calls = 0

    # -- one batched call ------------------------------------------------------------------
    def _cap(self, run: _Run, conv: list[dict[str, str]]) -> tuple[int, str | None]:
        """max_new_tokens allowed for this run's next call, or 0 and the limit that forbids it."""
        if run.calls + 1 > self.limits.max_calls:
            return 0, STOP_CALLS
        cap = min(self.sampling.max_new_tokens, self.limits.max_new_tokens, self.limits.max_tokens_per_run - run.out_tokens)
        if cap <= 0:
            return 0, STOP_TOKENS
        room = self.limits.max_model_len - self.limits.conversation_tokens(conv)
        if room < 1:
            return 0, STOP_CONTEXT
        return min(cap, room), None

    def _dispatch(self, agent_id: str, requests: list[tuple[_Run, list[dict[str, str]]]], n: int = 1
                  ) -> list[list[Completion] | str]:
        """Send every affordable request of one step; per request the ``n`` completions, or the
        limit (a ``STOP_*`` string) that kept it from being sent. Records nothing."""
        out: list[list[Completion] | str] = [""] * len(requests)
        groups: dict[int, list[int]] = {}
        for i, (run, conv) in enumerate(requests):
            cap, why = self._cap(run, conv)
            if why is not None:
                out[i] = why
            else:
                groups.setdefault(cap, []).append(i)
        for cap in sorted(groups, reverse=True):
            idx = groups[cap]
            seed = None if self.seed is None else self.seed * 1_000_003 + self.backend_calls
            cfg = self.sampling.model_copy(update={"max_new_tokens": cap, "n": n, "seed": seed})
            result = self.backend.chat([requests[i][1] for i in idx], cfg)
            self.backend_calls += 1
            if len(result) != len(idx) or any(len(r) != n for r in result):
                raise RuntimeError(f"backend {getattr(self.backend, 'name', '?')} broke the Backend contract at agent "
                                   f"{agent_id!r}: {len(idx)} prompts x n={n} asked, got {[len(r) for r in result]}")
            for i, comps in zip(idx, result):
                out[i] = comps
        return out

    def _record(self, run: _Run, agent_id: str, user: str, comp: Completion, thread: list[dict[str, str]] | None) -> str:
        text = comp.text if isinstance(comp.text, str) else ""
        run.log.append(AgentMessage(agent_id=agent_id, role="user", content=user))
        run.log.append(AgentMessage(agent_id=agent_id, role="assistant", content=text,
                                    prompt_tokens=max(0, int(comp.prompt_tokens)), output_tokens=max(0, int(comp.output_tokens))))
        run.calls += 1
        run.out_tokens += max(0, int(comp.output_tokens))
        if thread is not None:
            run.threads[agent_id] = thread + [{"role": "assistant", "content": text}]
        if comp.finish_reason == "error":
            run.stop = STOP_ERROR
        elif run.out_tokens > self.limits.max_tokens_per_run:
            run.stop = STOP_TOKENS
        return text

    # -- the workflow ----------------------------------------------------------------------
    def _inputs(self, run: _Run, agent_id: str) -> list[tuple[str, str]]:
        inputs = []
        for e in self.design.incoming(agent_id):
            text = run.outputs.get(e.source, "")
            if e.extract:
                text = extract_tag(text, e.extract) or ""
            inputs.append((e.label, _clip(text.strip(), self.limits.edge_chars)))
        return inputs

    def _dag_step(self, runs: list[_Run], agent_id: str, n: int = 1) -> list[_Run]:
        agent = self.design.agent(agent_id)
        requests = []
        for run in runs:
            q = self.questions[run.qi]
            inputs = self._inputs(run, agent_id)
            user = compose_prompt(agent.instruction, restated_problem(q, inputs), [i for i in inputs if i[0] != PROBLEM_LABEL])
            requests.append((run, run.threads.get(agent_id, []) + [{"role": "user", "content": user}]))
        results = self._dispatch(agent_id, requests, n)
        branched: list[_Run] = []
        for (run, conv), res in zip(requests, results):
            user = conv[-1]["content"]
            copies = [run] if n == 1 else [_Run(qi=run.qi, sample=s) for s in range(n)]
            if isinstance(res, str):
                for c in copies:
                    c.stop = res
                    c.log.append(AgentMessage(agent_id=agent_id, role="user", content=user))
            else:
                for c, comp in zip(copies, res):
                    c.outputs[agent_id] = self._record(c, agent_id, user, comp, conv)
            branched.extend(copies)
        return branched

    def _gate(self, runs: list[_Run]) -> None:
        gate, answer = self.design.gate, self.design.answer
        assert gate is not None
        for rnd in range(gate.max_redelegations + 1):
            pending = [r for r in runs if r.stop is None and not r.gate_done]
            if not pending:
                return
            requests = []
            for r in pending:
                user = review_prompt(gate, self.questions[r.qi].text, _clip(r.attempts[-1].strip(), self.limits.edge_chars))
                requests.append((r, [{"role": "user", "content": user}]))
            redo: list[_Run] = []
            for (r, conv), res in zip(requests, self._dispatch(gate.reviewer, requests)):
                if isinstance(res, str):
                    r.gate_done = True  # the gate is best-effort within the limits
                    continue
                text = self._record(r, gate.reviewer, conv[-1]["content"], res[0], None)
                verdict = parse_score(text)
                score = None if verdict.raw is None else verdict.score
                r.scores.append(score)
                if r.stop is not None:
                    continue
                if score is not None and score >= gate.threshold:
                    r.accepted, r.gate_done = len(r.attempts) - 1, True
                elif rnd < gate.max_redelegations:
                    redo.append(r)
                else:
                    r.gate_done = True
            if not redo:
                continue
            requests = [(r, r.threads.get(answer, []) + [{"role": "user", "content": gate.redelegate_message}]) for r in redo]
            for (r, conv), res in zip(requests, self._dispatch(answer, requests)):
                if isinstance(res, str):
                    r.gate_done = True
                    continue
                text = self._record(r, answer, conv[-1]["content"], res[0], conv)
                if r.stop is None:
                    r.attempts.append(text)
                    r.outputs[answer] = text

    def run(self, samples: int) -> ExecutionResult:
        order = self.design.execution_order()
        runs = [_Run(qi=i, sample=0) for i in range(len(self.questions))]
        for step, agent_id in enumerate(order):
            active = [r for r in runs if r.stop is None]
            if step == 0:
                runs = self._dag_step(runs, agent_id, n=samples)
            elif active:
                self._dag_step(active, agent_id)
        for r in runs:
            if r.stop is None:
                r.attempts.append(r.outputs.get(self.design.answer, ""))
        if self.design.gate is not None:
            self._gate(runs)
        return self._finish(runs, samples)

    def _finish(self, runs: list[_Run], samples: int) -> ExecutionResult:
        trajs, reasons, calls, scores = [], [], [], []
        did = self.design.design_id
        for r in runs:
            q = self.questions[r.qi]
            completed = r.stop is None and bool(r.attempts)
            final = None
            if completed:
                if r.accepted is not None:
                    chosen = r.attempts[r.accepted]
                elif r.scores:
                    # best-scored attempt, latest on ties; an unscored attempt (unparseable or not
                    # reviewed within the limits) counts as score 0
                    ranked = [(r.scores[i] if i < len(r.scores) and r.scores[i] is not None else 0.0, i)
                              for i in range(len(r.attempts))]
                    chosen = r.attempts[max(ranked)[1]]
                else:
                    chosen = r.attempts[-1]
                final = parse_solver(chosen, q.domain).answer
            trajs.append(Trajectory(id=f"{did}/{q.id}/{r.sample}", design_id=did, question_id=q.id, messages=r.log,
                                    final_answer=final, completed=completed, output_tokens=r.out_tokens))
            reasons.append(r.stop)
            calls.append(r.calls)
            scores.append(list(r.scores))
        return ExecutionResult(trajs, reasons, calls, scores, self.backend_calls)


def run_design(backend: Backend, design: WorkflowDesign, questions: Sequence[Question], *, limits: DesignLimits | None = None,
               sampling: SamplingConfig | None = None, samples: int = 1, seed: int | None = None,
               check_limits: bool = True) -> ExecutionResult:
    """Run ``design`` on ``questions`` (B of them) and return B x ``samples`` trajectories.

    Args:
        backend: any :class:`Backend`; called once per agent step for all active runs.
        design: the workflow design; its routing must be sound (``structural_problems``), and with
            ``check_limits`` it must also pass :func:`validate_design` against ``limits``.
        limits: run-time caps (default ``DesignLimits()``), enforced whether or not checked upfront.
        sampling: temperature/top_p/max_new_tokens/stop (``n`` and ``seed`` are set per call;
            default greedy, 96 new tokens).
        samples: runs per question (the orchestrator's step is sampled with ``n = samples``).
        seed: base seed; call k uses ``seed * 1_000_003 + k`` (deterministic where the backend is).

    Returns an :class:`ExecutionResult` (question-major order). Raises ``DesignError`` for an
    unsound or (with ``check_limits``) over-limit design, ``ValueError`` for ``samples`` < 1, and
    ``RuntimeError`` when the backend returns the wrong number of completions.
    """
    limits = limits or DesignLimits()
    sampling = sampling or SamplingConfig(temperature=0.0, max_new_tokens=limits.max_new_tokens)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    problems = structural_problems(design)
    if problems:
        raise DesignError(f"design {design.design_id} is invalid: " + "; ".join(problems))
    if check_limits:
        ok, reason = validate_design(design, limits)
        if not ok:
            raise DesignError(f"design {design.design_id} is over the limits: {reason}")
    if not questions:
        return ExecutionResult([], [], [], [], 0)
    return _Executor(backend, design, questions, limits, sampling, seed).run(samples)
