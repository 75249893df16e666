"""Champion vs single agent on held-out questions: the MASS benchmark of one model.

MASS (SakanaAI/mass) reports a searched design's accuracy beside the single-agent ("no harness")
run of the same model, and its performance per output token. ``champion_vs_single_agent`` runs
both designs greedily on the same held-out questions of the champion's domain, graded by the
external verifiers, and returns one row per design plus flat metrics. The ``evaluate`` stage runs
it on each cycle's model with that cycle's champion (``eval/mass.json``, metrics ``mass_*``), so the
per-cycle table comes out of the campaign itself; ``benchmarks/bench_mass.py`` runs it after a
stand-alone search.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any, Mapping, Sequence

from selfevolve.backends.base import Backend
from selfevolve.mass.design import DesignLimits, WorkflowDesign, single_agent
from selfevolve.mass.fitness import greedy_runs
from selfevolve.verifiers.grading import VerifyFn
from selfevolve.records import Question

#: The flat metric keys per design (``mass_<design>_<key>``).
ROW_KEYS = ("accuracy", "mean_output_tokens", "accuracy_per_1k_tokens", "completed_rate")


def champion_vs_single_agent(backend: Backend, champions: Mapping[str, WorkflowDesign], questions: Sequence[Question],
                             mass_params, verify_fn: VerifyFn, *, max_model_len: int, max_new_tokens: int,
                             seed: int = 0) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Run each domain's champion and the single-agent seed on that domain's ``questions``.

    Args:
        champions: domain -> champion design (``mass/champions.json`` of a cycle).
        questions: held-out questions (any domains; a domain without a champion is skipped).
        mass_params: ``config.MassParams`` (limits on agents, calls and tokens per run).
        verify_fn: ``(questions, answers) -> [score or None]`` (``search.stage_verify_fn``).
        max_model_len / max_new_tokens: the window and the per-call output allowance.

    Returns ``(rows, metrics)``. ``rows[domain]`` = ``{"questions": n, "champion": {...},
    "single_agent": {...}, "ratios": {...}}`` where each design row has ``design_id``, ``agents``,
    ``gate`` and ``ROW_KEYS``; ``ratios`` are champion / single agent (``None`` when undefined).
    ``metrics`` are flat floats for MLflow: ``mass_champion_<key>``, ``mass_single_agent_<key>``,
    ``mass_champion_is_single_agent`` and ``mass_heldout_n`` (for several domains the keys carry the
    domain: ``mass_<domain>_champion_<key>``). Runs are greedy and limits are not enforced on the
    single agent (it is the reference, as in the search). Per ``Question.split`` (arith: seed,
    frontier, beyond) each design row has ``by_split`` accuracies and the domain row ``p_by_split``,
    the exact McNemar p of champion against single agent on the same questions (``stats.mcnemar_exact``;
    ``p`` over all of them): metrics ``mass_<design>_accuracy_<split>``, ``mass_p_<split>``, ``mass_p``.
    """
    from selfevolve.stats import mcnemar_exact

    rows: dict[str, dict[str, Any]] = {}
    metrics: dict[str, float] = {}
    domains = [d for d in sorted(champions) if any(q.domain == d for q in questions)]
    for dom in domains:
        qs = [q for q in questions if q.domain == dom]
        limits = DesignLimits.from_params(mass_params, max_model_len=max_model_len, max_new_tokens=max_new_tokens,
                                          question_chars=max(len(q.text) for q in qs))
        row: dict[str, Any] = {"questions": len(qs)}
        right: dict[str, list[int]] = {}  # per design, 1/0 per question: the verdicts evaluate_design set on its runs
        pick = {sp: [i for i, q in enumerate(qs) if q.split == sp] for sp in sorted({q.split for q in qs if q.split})}
        for name, design in (("single_agent", single_agent(dom)), ("champion", champions[dom])):
            if name == "champion" and design.design_id == row["single_agent"]["design_id"]:
                row[name], right[name] = dict(row["single_agent"]), right["single_agent"]  # the same greedy runs: not run twice
                continue
            ev, runs = greedy_runs(backend, design, qs, verify_fn=verify_fn, limits=limits, seed=seed)
            right[name] = [int(bool(t.correct)) for t in runs]
            by_split = {sp: fmean(right[name][i] for i in ix) for sp, ix in pick.items()}
            row[name] = {"design_id": ev.design_id, "agents": design.agent_ids, "gate": design.gate is not None,
                         **{k: getattr(ev, k) for k in ROW_KEYS}, "by_split": by_split}
        row["ratios"] = {k: _ratio(row["champion"][k], row["single_agent"][k]) for k in ROW_KEYS}
        row["p"] = mcnemar_exact(right["single_agent"], right["champion"])[0]
        row["p_by_split"] = {sp: mcnemar_exact([right["single_agent"][i] for i in ix], [right["champion"][i] for i in ix])[0]
                             for sp, ix in pick.items()}
        rows[dom] = row
        prefix = "mass_" if len(domains) == 1 else f"mass_{dom}_"
        metrics[f"{prefix}heldout_n"] = float(len(qs))
        metrics[f"{prefix}champion_is_single_agent"] = float(row["champion"]["design_id"] == row["single_agent"]["design_id"])
        metrics[f"{prefix}p"] = float(row["p"])
        for sp, p in row["p_by_split"].items():
            metrics[f"{prefix}p_{sp}"] = float(p)
        for name in ("champion", "single_agent"):
            for k in ROW_KEYS:
                if row[name][k] is not None:
                    metrics[f"{prefix}{name}_{k}"] = float(row[name][k])
            for sp, acc in row[name]["by_split"].items():
                metrics[f"{prefix}{name}_accuracy_{sp}"] = float(acc)
    return rows, metrics


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def format_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """A plain-text table of ``champion_vs_single_agent`` rows (one line per domain and design)."""
    lines = [f"{'domain':<8}{'design':<14}{'id':<15}{'agents':<30}{'accuracy':>9}{'tokens/q':>10}{'acc/1k tok':>12}"]
    for dom, row in rows.items():
        for name in ("single_agent", "champion"):
            r = row[name]
            acc = "n/a" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
            per = "n/a" if r["accuracy_per_1k_tokens"] is None else f"{r['accuracy_per_1k_tokens']:.2f}"
            agents = "->".join(r["agents"]) + (" +gate" if r["gate"] else "")
            lines.append(f"{dom:<8}{name:<14}{r['design_id']:<15}{agents:<30}{acc:>9}{r['mean_output_tokens']:>10.1f}{per:>12}")
    return "\n".join(lines)
