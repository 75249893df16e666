"""Tolerant parsing of model-written workflow designs (untrusted text: nothing here raises).

The model writes a design as JSON inside ``<design></design>`` (``prompts/mass/propose.j2``), often
in shapes other than the schema of ``selfevolve.mass.design``: a bare agent list (the MASS
reference's format), other key names, missing edges. :func:`parse_design` finds the first JSON
object, maps those shapes onto the schema and returns ``(design, "ok")`` or ``(None, reason)``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from selfevolve.mass.design import DesignError, WorkflowDesign, describe_validation
from selfevolve.records import Domain
from selfevolve.roles.parsers import extract_tag, strip_code_fences

_MAX_BODY = 50_000
_MAX_JSON_STARTS = 24


def _first_json(body: str) -> Any:
    """The first JSON object/array in ``body`` (whole text, else scanning the first few ``{``/``[``)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"[\[{]", body)][:_MAX_JSON_STARTS]
    for s in starts:
        try:
            obj, _ = decoder.raw_decode(body, s)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, (dict, list)):
            return obj
    return None


def _pick(d: dict, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in d:
            return d[k]
    return default


def _normalise(obj: Any, domain: str) -> dict:
    """Map the shapes models write onto the schema: a bare agent list (the reference's format), key
    aliases (``id``/``name``, ``prompt``), edges as ``[source, target(, label)]`` pairs, missing
    orchestrator (first agent), answer (last agent) or edges (a chain in list order). Raises
    ``DesignError`` with a reason."""
    if isinstance(obj, dict) and isinstance(obj.get("design"), (dict, list)):
        obj = obj["design"]
    if isinstance(obj, list):
        obj = {"agents": obj}
    if not isinstance(obj, dict):
        raise DesignError(f"a design must be a JSON object or a list of agents, got {type(obj).__name__}")
    raw_agents = _pick(obj, "agents", "agent_candidates", "team")
    if not isinstance(raw_agents, list) or not raw_agents:
        raise DesignError("missing a non-empty 'agents' list")
    agents = []
    for i, a in enumerate(raw_agents):
        if not isinstance(a, dict):
            raise DesignError(f"agents[{i}] must be an object with agent_id, role, instruction")
        aid = _pick(a, "agent_id", "id", "name")
        role = _pick(a, "role", "title", default=aid)
        instruction = _pick(a, "instruction", "instructions", "prompt", "system_prompt")
        agents.append({"agent_id": aid, "role": role, "instruction": instruction})
    ids = [a["agent_id"] for a in agents]
    out: dict[str, Any] = {"domain": domain, "agents": agents}
    out["orchestrator"] = _pick(obj, "orchestrator", "entry", default=ids[0])
    out["answer"] = _pick(obj, "answer", "answer_node", "answer_agent", "final", default=ids[-1])
    raw_edges = _pick(obj, "edges", "routing", "connections")
    if raw_edges is None:
        raw_edges = [[ids[i], ids[i + 1]] for i in range(len(ids) - 1)]
    if not isinstance(raw_edges, list):
        raise DesignError("'edges' must be a list")
    edges = []
    for i, e in enumerate(raw_edges):
        if isinstance(e, (list, tuple)) and len(e) in (2, 3):
            edge = {"source": e[0], "target": e[1]}
            if len(e) == 3:
                edge["label"] = e[2]
        elif isinstance(e, dict):
            edge = {"source": _pick(e, "source", "from", "src"), "target": _pick(e, "target", "to", "dst")}
            for k in ("label", "extract"):
                if k in e:
                    edge[k] = e[k]
        else:
            raise DesignError(f"edges[{i}] must be an object {{source, target, label, extract}} or a [source, target] pair")
        edges.append(edge)
    out["edges"] = edges
    gate = obj.get("gate")
    if isinstance(gate, dict):
        gate = dict(gate)
        gate.setdefault("reviewer", out["orchestrator"])
        out["gate"] = gate
    elif gate not in (None, False):
        raise DesignError("'gate' must be an object {reviewer, instruction, threshold, max_redelegations} or null")
    return out


def design_from_obj(obj: Any, domain: Domain = "math", origin: str = "model") -> tuple[WorkflowDesign | None, str]:
    """Tolerantly build a design from parsed JSON: ``(design, "ok")`` or ``(None, reason)``. Never raises."""
    try:
        data = _normalise(obj, domain)
        data["origin"] = origin
        return WorkflowDesign.model_validate(data), "ok"
    except DesignError as exc:
        return None, str(exc)
    except ValidationError as exc:
        return None, "schema: " + describe_validation(exc)
    except Exception as exc:  # noqa: BLE001 - untrusted input
        return None, f"unusable design ({type(exc).__name__})"


def parse_design(text: Any, domain: Domain = "math", origin: str = "model") -> tuple[WorkflowDesign | None, str]:
    """Parse a design a model wrote: the JSON inside ``<design>...</design>`` (the last block; an
    unclosed block is read to the end; without the tag the whole text is searched), code fences
    stripped, the first JSON object/array found. Returns ``(design, "ok")`` or ``(None, reason)``;
    never raises. The design is schema-valid but not yet checked by :func:`validate_design`."""
    try:
        if not isinstance(text, str):
            return None, f"expected text, got {type(text).__name__}"
        body = extract_tag(text, "design")
        if body is None:
            body = text
        body = strip_code_fences(body)[:_MAX_BODY]
        if not body.strip():
            return None, "empty <design> block"
        obj = _first_json(body)
        if obj is None:
            return None, "no JSON object found in the <design> block"
        return design_from_obj(obj, domain, origin)
    except Exception as exc:  # noqa: BLE001 - untrusted input, never raise
        return None, f"unparseable design ({type(exc).__name__})"
