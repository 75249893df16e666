"""Structural operators on workflow designs: the fallback when a model-written design fails the
guardrails, and the structural "combine strengths" merge.

MASS (SakanaAI/mass) optimises prompts (instructions) and topologies (which agents, how they are
wired; the idea of searching both is also that of Zhou et al. 2025, "Multi-Agent Design: Optimizing
Agents with Better Prompts and Topologies"); the reference implementation (SakanaAI/mass) lets the model rewrite the design. With a
small model that rewrite almost never passes the guardrails, so the search falls back to these
operators: add an agent, remove an agent, rewire (add/remove an edge, toggle what an edge
extracts), change an instruction, and add/remove/retune the acceptance gate. Every operator works on
a copy and returns a new design or ``None``; :func:`mutate` retries until a child passes
:func:`design.validate_design` and is new.
"""

from __future__ import annotations

import copy
import random
from typing import Callable

from selfevolve.mass.design import DesignLimits, WorkflowDesign, template_instruction, validate_design

HINTS = (
    "Check each step before answering.",
    "Work step by step.",
    "Be brief.",
    "Write the final answer only once.",
    "Check the result by working backwards.",
)


def _library(domain: str) -> list[dict]:
    """Agents the add operator can insert: id, role, instruction, the label/extract of the edge that
    carries its output, and whether it goes after the answer node (becoming the new answer node)."""
    return [
        {"agent_id": "planner", "role": "Planner", "instruction": template_instruction("planner", domain),
         "label": "Plan", "extract": "plan", "final": False},
        {"agent_id": "analyst", "role": "Analyst",
         "instruction": "List the quantities and the operations the problem needs inside <plan></plan>. Do not solve it.",
         "label": "Notes", "extract": "plan", "final": False},
        {"agent_id": "drafter", "role": "Drafter", "instruction": template_instruction("solver", domain),
         "label": "Draft", "extract": "answer", "final": False},
        {"agent_id": "checker", "role": "Checker",
         "instruction": "Check the draft answer for mistakes. Think inside <think></think>, then give the corrected "
                        "final answer inside <answer></answer>.",
         "label": "Draft", "extract": None, "final": True},
    ]


def _unique_id(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    k = 2
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def _edge(source: str, target: str, label: str = "Input", extract: str | None = None) -> dict:
    return {"source": source, "target": target, "label": label, "extract": extract}


def op_add_agent(design: WorkflowDesign, d: dict, rng: random.Random) -> dict | None:
    kind = dict(rng.choice(_library(design.domain)))
    taken = set(design.agent_ids)
    new_id = _unique_id(kind["agent_id"], taken)
    agent = {"agent_id": new_id, "role": kind["role"], "instruction": kind["instruction"]}
    order = design.execution_order()
    if kind["final"]:
        # after the answer node: it sees the draft and becomes the answer node
        d["agents"].append(agent)
        d["edges"].append(_edge(design.answer, new_id, kind["label"], kind["extract"]))
        if d.get("gate") and d["gate"]["reviewer"] == design.answer:
            d["gate"]["reviewer"] = design.orchestrator
        d["answer"] = new_id
    elif len(order) == 1 or rng.random() < 0.3:
        # a new orchestrator in front of the current one
        d["agents"].insert(0, agent)
        d["edges"].append(_edge(new_id, design.orchestrator, kind["label"], kind["extract"]))
        d["orchestrator"] = new_id
    else:
        upstream = rng.choice([a for a in order if a != design.answer])
        pos = design.agent_ids.index(design.answer)
        d["agents"].insert(pos, agent)
        d["edges"].append(_edge(upstream, new_id, "Input", None))
        d["edges"].append(_edge(new_id, design.answer, kind["label"], kind["extract"]))
    return d


def op_remove_agent(design: WorkflowDesign, d: dict, rng: random.Random) -> dict | None:
    if len(design.agents) < 2:
        return None
    dag = design.reachable_from(design.orchestrator)
    victim = rng.choice([a for a in design.agent_ids if a != design.answer])
    keep_edges = [e for e in d["edges"] if victim not in (e["source"], e["target"])]
    d["agents"] = [a for a in d["agents"] if a["agent_id"] != victim]
    if victim not in dag:  # a gate-only reviewer
        d["edges"], d["gate"] = keep_edges, None
        return d
    if victim == design.orchestrator:
        succ = [e.target for e in design.outgoing(victim)]
        if len(succ) != 1 or any(e.source != victim for e in design.incoming(succ[0])):
            return None
        d["orchestrator"] = succ[0]
    else:
        existing = {(e["source"], e["target"]) for e in keep_edges}
        for p in design.incoming(victim):
            for s in design.outgoing(victim):
                if (p.source, s.target) not in existing:
                    keep_edges.append(_edge(p.source, s.target, p.label, p.extract))
                    existing.add((p.source, s.target))
    d["edges"] = keep_edges
    if d.get("gate") and d["gate"]["reviewer"] == victim:
        d["gate"]["reviewer"] = d["orchestrator"]
    return d


def op_rewire(design: WorkflowDesign, d: dict, rng: random.Random) -> dict | None:
    order = design.execution_order()
    existing = {(e["source"], e["target"]) for e in d["edges"]}
    choice = rng.choice(["add", "remove", "extract"])
    if choice == "add":
        pairs = [(u, v) for i, u in enumerate(order) for v in order[i + 1:]
                 if v != design.orchestrator and (u, v) not in existing]
        if not pairs:
            return None
        u, v = rng.choice(pairs)
        d["edges"].append(_edge(u, v, "Notes", None))
        return d
    if not d["edges"]:
        return None
    i = rng.randrange(len(d["edges"]))
    if choice == "remove":
        d["edges"].pop(i)
    else:
        e = d["edges"][i]
        e["extract"] = None if e.get("extract") else rng.choice(["plan", "answer"])
    return d


def op_change_instruction(design: WorkflowDesign, d: dict, rng: random.Random) -> dict | None:
    agent = rng.choice(d["agents"])
    text = agent["instruction"]
    present = [h for h in HINTS if h in text]
    absent = [h for h in HINTS if h not in text]
    canonical = None
    key = (agent["role"] + " " + agent["agent_id"]).lower()
    if "plan" in key:
        canonical = template_instruction("planner", design.domain)
    elif "solv" in key:
        canonical = template_instruction("solver", design.domain)
    options = []
    if absent:
        options.append("append")
    if present:
        options.append("drop")
    if canonical and canonical != text:
        options.append("reset")
    if not options:
        return None
    what = rng.choice(options)
    if what == "append":
        text = f"{text.rstrip()} {rng.choice(absent)}"
    elif what == "drop":
        text = " ".join(text.replace(rng.choice(present), " ").split())
    else:
        text = canonical
    if not text or len(text) > 2000:
        return None
    agent["instruction"] = text
    return d


def op_gate(design: WorkflowDesign, d: dict, rng: random.Random) -> dict | None:
    gate = d.get("gate")
    if gate is None:
        d["gate"] = {"reviewer": design.orchestrator, "max_redelegations": rng.choice([0, 1])}
        return d
    what = rng.choice(["remove", "more", "fewer", "threshold"])
    if what == "remove":
        d["gate"] = None
        if design.gate and design.gate.reviewer not in design.reachable_from(design.orchestrator):
            d["agents"] = [a for a in d["agents"] if a["agent_id"] != design.gate.reviewer]
    elif what == "more":
        gate["max_redelegations"] = min(8, gate["max_redelegations"] + 1)
    elif what == "fewer":
        if gate["max_redelegations"] == 0:
            return None
        gate["max_redelegations"] -= 1
    else:
        gate["threshold"] = 0.7 if gate["threshold"] <= 0.5 else 0.5
    return d


OPERATORS: dict[str, Callable[[WorkflowDesign, dict, random.Random], dict | None]] = {
    "add_agent": op_add_agent,
    "remove_agent": op_remove_agent,
    "rewire": op_rewire,
    "change_instruction": op_change_instruction,
    "gate": op_gate,
}


def _build(d: dict, origin: str, parents: list[str], name: str = "") -> WorkflowDesign | None:
    try:
        return WorkflowDesign.model_validate({**d, "origin": origin, "parents": parents, "name": name})
    except Exception:  # noqa: BLE001 - an operator produced a schema-invalid design; try another
        return None


def mutate(design: WorkflowDesign, rng: random.Random, limits: DesignLimits | None, seen: set[str],
           tries: int = 16) -> tuple[WorkflowDesign | None, list[str]]:
    """A random structural child of ``design`` that passes the guardrails and is not in ``seen``.

    Returns ``(child, reasons)``: ``child`` is ``None`` when ``tries`` attempts all failed; ``reasons``
    lists why rejected attempts failed (for the search's record). ``child.origin`` is
    ``mutation:<operator>`` and ``child.parents`` is ``[design.design_id]``.
    """
    reasons: list[str] = []
    names = list(OPERATORS)
    for _ in range(tries):
        name = rng.choice(names)
        try:
            d = OPERATORS[name](design, copy.deepcopy(design.structure()), rng)
        except Exception as exc:  # noqa: BLE001 - defensive: an operator on an odd design
            reasons.append(f"{name}: {type(exc).__name__}")
            continue
        if d is None:
            continue
        child = _build(d, f"mutation:{name}", [design.design_id])
        if child is None:
            reasons.append(f"{name}: schema")
            continue
        ok, reason = validate_design(child, limits)
        if not ok:
            reasons.append(f"{name}: {reason}")
            continue
        if child.design_id in seen:
            continue
        return child, reasons
    return None, reasons



def _with_gate(base: dict, gate: dict, base_instr: dict) -> dict:
    """A copy of ``base`` with ``gate``; a reviewer that ``base`` lacks becomes its orchestrator."""
    c = copy.deepcopy(base)
    g = dict(gate)
    if g["reviewer"] not in base_instr:
        g["reviewer"] = base["orchestrator"]
    c["gate"] = g
    return c


def _with_instructions(base: dict, instructions: dict, agent_ids: list[str]) -> dict:
    """A copy of ``base`` whose agents in ``agent_ids`` take their instruction from ``instructions``."""
    c = copy.deepcopy(base)
    for ag in c["agents"]:
        if ag["agent_id"] in agent_ids:
            ag["instruction"] = instructions[ag["agent_id"]]
    return c

def merge_designs(champion: WorkflowDesign, other: WorkflowDesign, limits: DesignLimits | None,
                  seen: set[str]) -> WorkflowDesign | None:
    """Structural "combine strengths" of the champion with a newer design (MASS: when the champion is
    older than the current design, the two are combined). Candidates, first valid and unseen wins:

    1. the champion with the other's gate;
    2. the champion with the other's instructions for the agents both have;
    3. the champion with one of the other's extra agents spliced in upstream of its answer node
       (fed by the champion's orchestrator, feeding the answer under the agent's own edge label);
    4. the other with the champion's instructions for shared agents;
    5. the other with the champion's gate.
    """
    parents = [champion.design_id, other.design_id]
    a, b = champion.structure(), other.structure()
    b_instr = {x["agent_id"]: x["instruction"] for x in b["agents"]}
    a_instr = {x["agent_id"]: x["instruction"] for x in a["agents"]}
    cands: list[dict] = []
    if b.get("gate") != a.get("gate") and b.get("gate") is not None:
        cands.append(_with_gate(a, b["gate"], a_instr))
    shared = [k for k in a_instr if k in b_instr and a_instr[k] != b_instr[k]]
    if shared:
        cands.append(_with_instructions(a, b_instr, shared))
    for ag in b["agents"]:
        if ag["agent_id"] in a_instr:
            continue
        c = copy.deepcopy(a)
        out = next((e for e in b["edges"] if e["source"] == ag["agent_id"]), None)
        label, extract = (out["label"], out["extract"]) if out else ("Input", None)
        pos = next(i for i, x in enumerate(c["agents"]) if x["agent_id"] == c["answer"])
        c["agents"].insert(pos, dict(ag))
        if c["orchestrator"] == c["answer"]:
            c["orchestrator"] = ag["agent_id"]
        else:
            c["edges"].append(_edge(c["orchestrator"], ag["agent_id"], "Input", None))
        c["edges"].append(_edge(ag["agent_id"], c["answer"], label, extract))
        cands.append(c)
    if shared:
        cands.append(_with_instructions(b, a_instr, shared))
    if a.get("gate") is not None and a.get("gate") != b.get("gate"):
        cands.append(_with_gate(b, a["gate"], b_instr))
    for c in cands:
        child = _build(c, "merge", parents)
        if child is None or child.design_id in seen:
            continue
        if validate_design(child, limits)[0]:
            return child
    return None
