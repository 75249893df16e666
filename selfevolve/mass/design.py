"""Workflow designs as data, their guardrails and the seed designs.

A *workflow design* (MASS ("Recursive Self-Improvement through Multi-Agent Self-Supervision", SakanaAI; reference code SakanaAI/mass)) is a small JSON document:

- ``agents``: agent nodes, each ``{agent_id, role, instruction}`` (the reference's schema);
- ``orchestrator``: the agent that receives the question first (the entry of the routing DAG);
- ``edges``: who passes what to whom. An edge ``{source, target, label, extract}`` shows the
  ``source`` agent's output (or only the content of its ``<extract>`` tag) to ``target`` under
  ``label``. Edges must form a DAG rooted at the orchestrator;
- ``answer``: the agent whose output holds the final ``<answer>``;
- ``gate`` (optional): the acceptance gate. A ``reviewer`` scores the answer agent's output
  (``<score>N</score>``); below ``threshold`` the answer agent is re-delegated the problem, at most
  ``max_redelegations`` times (the reference's "orchestrator verifies worker output before accepting").

Every agent sees the problem: the question, or what an edge labelled ``Problem`` carries to it,
restated as a question of the domain (``executor.restated_problem``). Its user turn
(:func:`compose_prompt`)::

    {instruction}
    Problem: {question}
    {label}: {content of edge 1}
    ...

so the SAGE Planner and Solver templates (``selfevolve/prompts/roles``) are reproduced exactly by
the seed :func:`planner_solver` (its instructions are taken from ``templates.render``).

Guardrails (:func:`validate_design`) reject a design with a reason: schema, unique ids, known
references, acyclic routing, every agent reachable from the orchestrator and feeding the answer
node, caps on agents / calls / output tokens per run (``MassParams``), and the reference's
context-budget estimate (characters / 4 plus the output allowance fits ``max_model_len``; the
search calibrates the characters-per-token ratio down from the backend's own token counts when the
tokenizer packs fewer than 4 characters per token, as small vocabularies do).
Model-written designs are parsed by ``selfevolve.mass.parse`` (untrusted text: it never raises).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from selfevolve.questions import arith
from selfevolve.records import Domain

AGENT_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
TAG_PATTERN = r"^[a-z][a-z0-9_]{0,15}$"
LABEL_PATTERN = r"^[A-Za-z][A-Za-z0-9 _-]{0,29}$"
PROBLEM_LABEL = "Problem"
ANSWER_LABEL = "Answer"
#: Tokens per chat message for role markers (``<|role|>\\n ... <|eos|>\\n``) in the budget estimate.
MESSAGE_OVERHEAD_TOKENS = 4

DEFAULT_REVIEW_INSTRUCTION = "Rate the answer to the problem from 1 to 10: is it correct? Reply <score>N</score>."
DEFAULT_REDELEGATE_MESSAGE = "The reviewer rejected this answer. Solve the problem again and give the final answer inside <answer></answer>."


class DesignError(ValueError):
    """A design cannot be run (invalid schema or routing, or over a limit). The message is the reason."""


class AgentSpec(BaseModel):
    """One agent node: ``agent_id`` (identifier), ``role`` (a short title, shown to the design
    proposer and recorded; not part of the prompt) and ``instruction`` (the head of its user turn)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    role: str = Field(min_length=1, max_length=120)
    instruction: str = Field(min_length=1, max_length=2000)


class Edge(BaseModel):
    """``source``'s output shown to ``target`` as ``"{label}: {content}"``. With ``extract`` set, only
    the content of the source's last ``<extract>...</extract>`` is passed, and nothing (the line is
    left out) when the tag is missing or empty, as SAGE leaves out an unparseable plan. An edge
    labelled :data:`PROBLEM_LABEL` gives ``target`` its problem instead of a line (a sub-problem)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(pattern=AGENT_ID_PATTERN)
    target: str = Field(pattern=AGENT_ID_PATTERN)
    label: str = Field("Input", pattern=LABEL_PATTERN)
    extract: str | None = Field(None, pattern=TAG_PATTERN)


class Gate(BaseModel):
    """Acceptance gate: ``reviewer`` rates the answer agent's output in a fresh turn
    (``instruction`` + problem + answer; ``<score>N</score>``, normalised to [0, 1] as the Critic's).
    A score below ``threshold`` (or an unparseable one) re-delegates: the answer agent gets
    ``redelegate_message`` in its own thread and answers again. At most ``max_redelegations``
    re-delegations; if none is accepted the best-scored attempt (latest on ties) is the answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reviewer: str = Field(pattern=AGENT_ID_PATTERN)
    instruction: str = Field(DEFAULT_REVIEW_INSTRUCTION, min_length=1, max_length=1000)
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    max_redelegations: int = Field(1, ge=0, le=8)
    redelegate_message: str = Field(DEFAULT_REDELEGATE_MESSAGE, min_length=1, max_length=500)


_META_FIELDS = {"name", "origin", "parents"}


class WorkflowDesign(BaseModel):
    """A workflow design (see the module docstring). ``name``, ``origin`` (seed, model, mutation:op,
    merge, previous) and ``parents`` (design ids) are bookkeeping and do not change ``design_id``.

    Field-level schema is enforced here; routing and limits by :func:`validate_design`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: Domain = "math"
    agents: list[AgentSpec] = Field(min_length=1, max_length=64)
    orchestrator: str = Field(pattern=AGENT_ID_PATTERN)
    edges: list[Edge] = Field(default_factory=list, max_length=512)
    answer: str = Field(pattern=AGENT_ID_PATTERN)
    gate: Gate | None = None
    name: str = Field("", max_length=200)
    origin: str = Field("seed", max_length=200)
    parents: list[str] = Field(default_factory=list, max_length=8)

    # -- identity and serialisation -------------------------------------------------------
    def structure(self) -> dict[str, Any]:
        """The design without bookkeeping fields (what the proposer sees and what is hashed)."""
        return self.model_dump(mode="json", exclude=_META_FIELDS)

    def structure_json(self, indent: int | None = None) -> str:
        return json.dumps(self.structure(), ensure_ascii=False, sort_keys=False, indent=indent,
                          separators=None if indent else (",", ":"))

    @property
    def design_id(self) -> str:
        """``d-`` + 10 hex digits of the SHA-1 of the canonical structure JSON (content address)."""
        canon = json.dumps(self.structure(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return "d-" + hashlib.sha1(canon.encode("utf-8")).hexdigest()[:10]

    def to_json(self) -> str:
        """Full JSON (structure + bookkeeping); :meth:`from_json` reads it back."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> "WorkflowDesign":
        """Strict load of :meth:`to_json` output; raises ``pydantic.ValidationError``. For untrusted
        text use :func:`parse_design`."""
        return cls.model_validate_json(text)

    # -- graph helpers (assume unique ids; validate_design checks) -------------------------
    @property
    def agent_ids(self) -> list[str]:
        return [a.agent_id for a in self.agents]

    def agent(self, agent_id: str) -> AgentSpec:
        for a in self.agents:
            if a.agent_id == agent_id:
                return a
        raise KeyError(f"design {self.design_id} has no agent {agent_id!r}; agents: {self.agent_ids}")

    def incoming(self, agent_id: str) -> list[Edge]:
        return [e for e in self.edges if e.target == agent_id]

    def outgoing(self, agent_id: str) -> list[Edge]:
        return [e for e in self.edges if e.source == agent_id]

    def reachable_from(self, start: str) -> set[str]:
        seen, stack = {start}, [start]
        while stack:
            node = stack.pop()
            for e in self.outgoing(node):
                if e.target not in seen:
                    seen.add(e.target)
                    stack.append(e.target)
        return seen

    def execution_order(self) -> list[str]:
        """The DAG agents (reachable from the orchestrator) in topological order, ties broken by
        their position in ``agents``; the orchestrator is first. Raises ``DesignError`` on a cycle."""
        dag = self.reachable_from(self.orchestrator)
        order: list[str] = []
        while len(order) < len(dag):
            ready = [a for a in self.agent_ids if a in dag and a not in order
                     and all(e.source in order or e.source not in dag for e in self.incoming(a))]
            if not ready:
                raise DesignError(f"routing has a cycle through {sorted(set(dag) - set(order))}")
            order.append(ready[0])
        return order

    def call_counts(self) -> tuple[int, int]:
        """(calls of a run without re-delegation, worst-case calls) per question.

        DAG agents run once; a gate adds one review per attempt and one re-run per re-delegation:
        worst = n_dag + 1 + 2 * max_redelegations.
        """
        n_dag = len(self.reachable_from(self.orchestrator))
        if self.gate is None:
            return n_dag, n_dag
        return n_dag + 1, n_dag + 1 + 2 * self.gate.max_redelegations


# ----------------------------------------------------------------------------------------
# limits and guardrails
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DesignLimits:
    """Per-run caps and the context window the guardrails check against.

    ``max_agents``, ``max_calls`` (backend calls per question), ``max_tokens_per_run`` (output tokens
    per question, all agents together) come from ``MassParams``; ``max_model_len`` from
    ``ModelParams``; ``max_new_tokens`` is the per-call output allowance (``SamplingParams``);
    ``question_chars`` the longest question text the estimate assumes; ``chars_per_token`` the
    estimate's ratio (4 in the reference; lower it for tokenizers that pack fewer characters).
    """

    max_agents: int = 4
    max_calls: int = 6
    max_tokens_per_run: int = 1024
    max_model_len: int = 512
    max_new_tokens: int = 96
    question_chars: int = 400
    chars_per_token: float = 4.0

    @property
    def edge_chars(self) -> int:
        """Characters of one agent output passed along an edge (outputs are clipped to this)."""
        return int(self.chars_per_token * self.max_new_tokens)

    @classmethod
    def from_params(cls, mass, max_model_len: int = 512, max_new_tokens: int = 96, question_chars: int = 400,
                    chars_per_token: float = 4.0) -> "DesignLimits":
        """From a ``config.MassParams`` plus the model window and per-call output allowance."""
        return cls(max_agents=mass.max_agents, max_calls=mass.max_calls, max_tokens_per_run=mass.max_tokens_per_run,
                   max_model_len=max_model_len, max_new_tokens=max_new_tokens, question_chars=question_chars,
                   chars_per_token=chars_per_token)

    def tokens(self, chars: int) -> int:
        """Estimated tokens of ``chars`` characters: ceil(chars / chars_per_token)."""
        return estimate_tokens(chars, self.chars_per_token)

    def conversation_tokens(self, messages: Iterable[dict[str, str]]) -> int:
        return estimate_conversation_tokens(messages, self.chars_per_token)


def estimate_tokens(chars: int, chars_per_token: float = 4.0) -> int:
    """The reference's estimate: ceil(characters / 4) (``chars_per_token`` = 4)."""
    return max(0, math.ceil(chars / max(chars_per_token, 0.25)))


def estimate_conversation_tokens(messages: Iterable[dict[str, str]], chars_per_token: float = 4.0) -> int:
    """Estimated prompt tokens of a chat: characters / ``chars_per_token`` of every content plus the
    per-message overhead (role markers)."""
    return sum(estimate_tokens(len(m.get("content", "") or ""), chars_per_token) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def compose_prompt(instruction: str, question: str, inputs: Iterable[tuple[str, str]] = ()) -> str:
    """The user turn of an agent: ``instruction``, ``Problem: question`` and one ``label: content``
    line per non-empty input, joined by newlines (reproduces ``selfevolve/prompts/roles/solver.j2``)."""
    lines = [instruction.strip(), f"{PROBLEM_LABEL}: {question}"]
    lines += [f"{label}: {text}" for label, text in inputs if text]
    return "\n".join(lines)


def review_prompt(gate: Gate, question: str, answer_text: str) -> str:
    """The reviewer's (fresh) user turn of the gate."""
    return compose_prompt(gate.instruction, question, [(ANSWER_LABEL, answer_text)])


def _context_problems(design: WorkflowDesign, limits: DesignLimits) -> list[str]:
    """Worst-case prompt estimate + output allowance per turn against ``max_model_len``."""
    window, out = limits.max_model_len, limits.max_new_tokens
    q, e = limits.question_chars, limits.edge_chars
    problems: list[str] = []
    prompt_tokens: dict[str, int] = {}
    for a in design.agents:
        chars = len(a.instruction) + len(PROBLEM_LABEL) + 3 + q
        chars += sum(len(ed.label) + 3 + e for ed in design.incoming(a.agent_id))
        prompt_tokens[a.agent_id] = limits.tokens(chars) + MESSAGE_OVERHEAD_TOKENS
    for aid in design.reachable_from(design.orchestrator):
        need = prompt_tokens[aid] + out
        if need > window:
            problems.append(f"context budget: agent {aid!r} needs ~{need} tokens (prompt ~{prompt_tokens[aid]} "
                            f"by characters/{limits.chars_per_token:g} + {out} output) > max_model_len {window}")
    if design.gate is not None and not problems:
        g = design.gate
        review = limits.tokens(len(g.instruction) + len(PROBLEM_LABEL) + len(ANSWER_LABEL) + 6 + q + e) + MESSAGE_OVERHEAD_TOKENS
        if review + out > window:
            problems.append(f"context budget: the gate's review turn needs ~{review + out} tokens > max_model_len {window}")
        # the answer agent's thread grows by one re-delegation turn + one answer per round
        thread = prompt_tokens.get(design.answer, 0) + out
        thread += g.max_redelegations * (limits.tokens(len(g.redelegate_message)) + MESSAGE_OVERHEAD_TOKENS + out)
        if thread > window:
            problems.append(f"context budget: the answer agent's thread after {g.max_redelegations} re-delegation(s) "
                            f"needs ~{thread} tokens > max_model_len {window}")
    return problems


def structural_problems(design: WorkflowDesign) -> list[str]:
    """Routing problems of a schema-valid design (empty list = sound). Never raises."""
    ids = design.agent_ids
    problems: list[str] = []
    dup = sorted({a for a in ids if ids.count(a) > 1})
    if dup:
        return [f"duplicate agent_id(s) {dup}"]
    known = set(ids)
    for field, ref in (("orchestrator", design.orchestrator), ("answer", design.answer)):
        if ref not in known:
            problems.append(f"{field} {ref!r} is not an agent (agents: {ids})")
    if design.gate is not None and design.gate.reviewer not in known:
        problems.append(f"gate reviewer {design.gate.reviewer!r} is not an agent (agents: {ids})")
    seen_edges = set()
    for e in design.edges:
        if e.source not in known or e.target not in known:
            problems.append(f"edge {e.source}->{e.target} names an unknown agent (agents: {ids})")
        if e.source == e.target:
            problems.append(f"edge {e.source}->{e.target} is a self-loop")
        if (e.source, e.target) in seen_edges:
            problems.append(f"duplicate edge {e.source}->{e.target}")
        seen_edges.add((e.source, e.target))
    if problems:
        return problems
    if design.incoming(design.orchestrator):
        problems.append(f"orchestrator {design.orchestrator!r} must receive the question first (it has incoming edges)")
    try:
        design.execution_order()
    except DesignError as exc:
        problems.append(str(exc))
        return problems
    dag = design.reachable_from(design.orchestrator)
    if design.answer not in dag:
        problems.append(f"answer node {design.answer!r} is not reachable from orchestrator {design.orchestrator!r}")
        return problems
    reviewer_only = design.gate.reviewer if design.gate is not None else None
    for aid in ids:
        if aid in dag:
            if design.answer not in design.reachable_from(aid):
                problems.append(f"agent {aid!r}'s output never reaches the answer node {design.answer!r}")
        elif not (aid == reviewer_only and not design.incoming(aid) and not design.outgoing(aid)):
            problems.append(f"agent {aid!r} is not reachable from orchestrator {design.orchestrator!r}")
    return problems


def limit_problems(design: WorkflowDesign, limits: DesignLimits) -> list[str]:
    """Caps on agents, calls and output tokens per run, and the context budget. Never raises."""
    problems: list[str] = []
    if len(design.agents) > limits.max_agents:
        problems.append(f"{len(design.agents)} agents > max_agents {limits.max_agents}")
    base_calls, worst_calls = design.call_counts()
    if worst_calls > limits.max_calls:
        problems.append(f"up to {worst_calls} calls per run > max_calls {limits.max_calls}")
    need = base_calls * limits.max_new_tokens
    if need > limits.max_tokens_per_run:
        problems.append(f"a run without re-delegation may emit {base_calls} x {limits.max_new_tokens} = {need} "
                        f"output tokens > max_tokens_per_run {limits.max_tokens_per_run}")
    if not problems:
        problems += _context_problems(design, limits)
    return problems


def validate_design(design: Any, limits: DesignLimits | None = None) -> tuple[bool, str]:
    """Guardrails: ``(True, "ok")`` or ``(False, reason)``; never raises.

    ``design`` may be a :class:`WorkflowDesign`, a mapping (validated against the schema) or JSON
    text (strict; use :func:`parse_design` for model output). Checks, in order: schema; unique ids
    and known references; no self-loops or duplicate edges; the orchestrator has no incoming edge;
    routing acyclic; the answer node reachable from the orchestrator; every agent reachable from the
    orchestrator (a gate-only reviewer excepted) and feeding the answer node; with ``limits``: agents,
    worst-case calls, output tokens of a run without re-delegation, and the context budget.
    """
    try:
        if not isinstance(design, WorkflowDesign):
            if isinstance(design, (str, bytes)):
                design = WorkflowDesign.model_validate_json(design)
            elif isinstance(design, dict):
                design = WorkflowDesign.model_validate(design)
            else:
                return False, f"schema: expected a design object, got {type(design).__name__}"
    except ValidationError as exc:
        return False, "schema: " + describe_validation(exc)
    except Exception as exc:  # noqa: BLE001 - untrusted input, never raise
        return False, f"schema: {type(exc).__name__}"
    try:
        problems = structural_problems(design)
        if not problems and limits is not None:
            problems = limit_problems(design, limits)
    except Exception as exc:  # noqa: BLE001 - defensive: guardrails never raise
        return False, f"invalid design ({type(exc).__name__}: {str(exc)[:200]})"
    if problems:
        return False, "; ".join(problems)
    return True, "ok"


def describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(design)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


# ----------------------------------------------------------------------------------------
# seed designs
# ----------------------------------------------------------------------------------------
_SENTINEL = "\x00QUESTION\x00"


def template_instruction(role: str, domain: str = "math") -> str:
    """The instruction part of a SAGE role template (the text before ``Problem:``), rendered with
    ``selfevolve.roles.templates.render`` so seed agents speak exactly the roles' prompts."""
    from selfevolve.roles.templates import render

    text = render(role, question=_SENTINEL, domain=domain, plan=None)
    head, sep, _ = text.partition(f"\n{PROBLEM_LABEL}: {_SENTINEL}")
    if not sep:
        raise DesignError(f"role template {role!r} no longer has a '{PROBLEM_LABEL}: {{question}}' line")
    return head.strip()


def single_agent(domain: Domain = "math") -> WorkflowDesign:
    """One Solver answering the bare problem: the MASS "no-harness" reference."""
    solver = AgentSpec(agent_id="solver", role="Solver", instruction=template_instruction("solver", domain))
    return WorkflowDesign(domain=domain, agents=[solver], orchestrator="solver", answer="solver", name="single_agent")


def planner_solver(domain: Domain = "math") -> WorkflowDesign:
    """SAGE's pipeline: the Planner (orchestrator) writes ``<plan>``, the Solver gets it as ``Plan:``."""
    planner = AgentSpec(agent_id="planner", role="Planner", instruction=template_instruction("planner", domain))
    solver = AgentSpec(agent_id="solver", role="Solver", instruction=template_instruction("solver", domain))
    return WorkflowDesign(domain=domain, agents=[planner, solver], orchestrator="planner", answer="solver",
                          edges=[Edge(source="planner", target="solver", label="Plan", extract="plan")],
                          name="planner_solver")


def planner_solver_review(domain: Domain = "math") -> WorkflowDesign:
    """:func:`planner_solver` with the orchestrator verifying the Solver's answer (one re-delegation)."""
    base = planner_solver(domain)
    return base.model_copy(update={"gate": Gate(reviewer="planner", max_redelegations=1), "name": "planner_solver_review"})


SPLIT_INSTRUCTION = (f"Split the problem: both numbers with zeros in front to {2 * arith.SPLIT_DIGITS} digits inside <think></think>, then "
                     f"the last {arith.SPLIT_DIGITS} digits of each inside <low></low> and the digits before them inside <high></high>.")
COMBINE_INSTRUCTION = ("Combine the low and high sums: carry the low sum's thousands into the high sum. "
                       "Think inside <think></think>, then give the final answer inside <answer></answer>.")
#: Edge labels of the combiner's inputs in :func:`split_solver_combine` (the warm start's transcripts of its role use the same).
LOW_SUM, HIGH_SUM = "Low", "High"


def split_solver_combine(domain: Domain = "math") -> WorkflowDesign:
    """Decomposition (SECToR, Zhang et al. 2023, arXiv 2309.08589): a splitter (orchestrator) pads
    both numbers and writes a sum's low part (the last :data:`arith.SPLIT_DIGITS` digits of each)
    and high part (``arith.split_reply``); each part goes to a Solver as its own problem
    (``Problem`` edges, restated by ``executor.restated_problem``: ``042 + 767`` -> ``Compute 42 +
    767.``, under the Solver's own prompt), and a combiner carries the low sum into the high one
    (``arith.combine_worked``). So the team reaches 3 digits past what one pass does (every sum up
    to 6+6 digits becomes two seed-form sums at the start), and further as one pass learns. The
    splitter's and combiner's roles are taught in the embedded warm start's last round
    (``bootstrap.split_steps``; reading and a carry on seed forms only); a model that never learned
    them scores 0 with it, and the search keeps the single agent."""
    solve = template_instruction("solver", domain)
    agents = [AgentSpec(agent_id="splitter", role="Splitter", instruction=SPLIT_INSTRUCTION),
              AgentSpec(agent_id="low", role="Low-part solver", instruction=solve),
              AgentSpec(agent_id="high", role="High-part solver", instruction=solve),
              AgentSpec(agent_id="combiner", role="Combiner", instruction=COMBINE_INSTRUCTION)]
    edges = [Edge(source="splitter", target="low", label=PROBLEM_LABEL, extract="low"),
             Edge(source="splitter", target="high", label=PROBLEM_LABEL, extract="high"),
             Edge(source="low", target="combiner", label=LOW_SUM, extract="answer"),
             Edge(source="high", target="combiner", label=HIGH_SUM, extract="answer")]
    return WorkflowDesign(domain=domain, agents=agents, orchestrator="splitter", answer="combiner", edges=edges,
                          name="split_solver_combine")


#: Seed designs whose agents only make sense for arithmetic (left out of other domains' seeds).
MATH_ONLY = {"split_solver_combine"}
SEED_DESIGNS = {"single_agent": single_agent, "split_solver_combine": split_solver_combine,
                "planner_solver": planner_solver, "planner_solver_review": planner_solver_review}


def seed_designs(domain: Domain = "math", names: Iterable[str] | None = None) -> list[WorkflowDesign]:
    """The seed population, in the order of ``names`` (default: every :data:`SEED_DESIGNS` entry:
    single agent, split/solve/combine with the Solver on the parts, planner->solver, the same with a gate). Raises
    ``KeyError`` for an unknown name (``MassParams.seed_designs`` is checked against these at load)."""
    return [SEED_DESIGNS[n](domain) for n in (SEED_DESIGNS if names is None else names)
            if domain == "math" or n not in MATH_ONLY]


def load_champions(path: str | os.PathLike) -> dict[str, WorkflowDesign]:
    """A cycle's ``mass/champions.json`` (domain -> design JSON) as domain -> :class:`WorkflowDesign`.
    Raises ``OSError`` when the file cannot be read, ``json.JSONDecodeError`` / pydantic's
    ``ValidationError`` when it is not a mapping of valid designs."""
    return {d: WorkflowDesign.model_validate(obj) for d, obj in json.loads(Path(path).read_text()).items()}
