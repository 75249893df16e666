"""A short written conclusion per cycle, generated from its headline metrics (``selfevolve.headline``):
what changed on the held-out splits against the base model and on the unsupervised rungs against
the cycle it started from, each with the exact McNemar p-value (a change is claimed only at
p < ``SIGNIFICANT``), what the pool and the Solver's self-labels grew by, which model the cycle
kept (``selfevolve.model_registry.kept``) and what its MASS champion did against one pass."""

from __future__ import annotations

from selfevolve import headline
from selfevolve.model_registry import kept
from selfevolve.questions.arith import ladder_holes
from selfevolve.reporting.collect import CampaignData

#: p-value below which a difference from the base model is called a change.
SIGNIFICANT = 0.05
#: (headline accuracy, its p-value vs base, how the sentence names it)
SPLITS = (("frontier accuracy", "frontier p vs base", "frontier accuracy"),
          ("seed accuracy", "seed p vs base", "seed-form accuracy"))


def _split_sentence(name: str, value: float, base: float | None, p: float | None) -> str:
    acc = headline.fmt(value, "accuracy")
    if base is None:
        return f"{name} {acc} (no base model value to compare with)"
    was = f"{acc} against the base model's {headline.fmt(base, 'accuracy')}"
    if p is None:
        return f"{name} {was} (no p-value)"
    if p >= SIGNIFICANT:
        return f"{name} {was}: no significant change (p = {headline.fmt(p, 'p')})"
    return f"{name} {'improved' if value > base else 'dropped'}: {was} (p = {headline.fmt(p, 'p')})"


def _mass_sentence(mass: dict[str, float | None]) -> str:
    """What the cycle's MASS champion did against one pass on the same held-out questions
    (``mass_*`` of ``evaluate.json``: ``mass.benchmark.champion_vs_single_agent``), per split."""
    if mass.get("mass_champion_is_single_agent") is None:
        return ""
    if mass["mass_champion_is_single_agent"]:
        return " Its MASS champion was the single agent."
    parts = []
    for split, label in (("frontier", "frontier"), ("beyond", "rungs beyond")):
        c, one, p = (mass.get(f"mass_{k}") for k in (f"champion_accuracy_{split}", f"single_agent_accuracy_{split}", f"p_{split}"))
        if c is not None and one is not None and p is not None:
            parts.append(f"{label} {c:.3f} against {one:.3f} (p = {headline.fmt(p, 'p')})")
    return (" Its MASS champion, a multi-agent design, against one pass on the same held-out questions: "
            + "; ".join(parts) + ".") if parts else " Its MASS champion is a multi-agent design."


#: The ``evaluate`` metrics :func:`_mass_sentence` reads.
MASS_KEYS = tuple(["mass_champion_is_single_agent"] + [f"mass_{k}_{s}" for s in ("frontier", "beyond")
                                                        for k in ("champion_accuracy", "single_agent_accuracy", "p")])


def _holes_sentence(form_accuracy: dict[str, float]) -> str:
    """The ladder's holes (``selfevolve.questions.arith.ladder_holes``) in one sentence, or ``""``."""
    holes = ladder_holes(form_accuracy)
    if not holes:
        return ""
    named = ", ".join(f"{f} ({form_accuracy[f]:.2f}; {h} {form_accuracy[h]:.2f})" for f, h in holes.items())
    return f" Holes in the ladder, forms it fails while it solves a harder one: {named}."


def cycle_conclusion(cycle: str, metrics: dict[str, float], base: dict[str, float], init: str | None,
                     rungs_vs_init: tuple[float, float] | None = None, mass: dict[str, float | None] | None = None,
                     forms: dict[str, float] | None = None) -> str:
    """One cycle's conclusion in two to four sentences from its headline ``metrics`` and the base
    model's (``base``), both by readable name (``headline.values``); ``init`` is the cycle it
    started from, ``rungs_vs_init`` (gain as a fraction of the questions, exact McNemar p) its
    change on the unsupervised rungs against that cycle's model (``heldout_rungs_*_vs_prev``), said
    when ``init`` is a cycle and not the base model (against base the split sentences say it);
    ``mass``: the cycle's ``MASS_KEYS`` metrics, for a sentence on its MASS champion; ``forms``: its
    held-out accuracy per form (``CampaignData.form_accuracy``), for a sentence on the ladder's holes."""
    parts = [_split_sentence(label, metrics[acc], base.get(acc), metrics.get(p))
             for acc, p, label in SPLITS if acc in metrics]
    text = ("; ".join(parts) + ".") if parts else "No held-out evaluation."
    text = text[0].upper() + text[1:]
    if init and init != "base" and rungs_vs_init is not None:
        gain, p = rungs_vs_init
        moved = "no significant change" if p >= SIGNIFICANT else ("rose" if gain > 0 else "fell")
        text += (f" Against {init}, the model it started from, the unsupervised rungs together {moved} "
                 f"({gain:+.3f}, p = {headline.fmt(p, 'p')}).")
    grew = [f"{int(metrics[k])} {what}" for k, what in (("pool growth", "new pool questions"),
                                                        ("self-labels", "self-labels for the Solver")) if k in metrics]
    if grew:
        text += f" It added {' and '.join(grew)}."
    text += _holes_sentence(forms or {})
    text += _mass_sentence(mass or {})
    return text + f" Kept: {kept(metrics, cycle, init)}."


def conclusions(data: CampaignData) -> dict[str, str]:
    """Cycle name -> conclusion (``cycle_conclusion``) for every cycle after ``base`` that has metrics."""
    base = headline.values(data.metrics.get("base", {}))
    cycles = data.params.get("cycles") or {}

    def rungs(c: str) -> tuple[float, float] | None:
        gain, p = (data.metric(c, "evaluate", f"heldout_rungs_{k}_vs_prev") for k in ("gain", "p"))
        return None if gain is None or p is None else (gain, p)

    return {c: cycle_conclusion(c, headline.values(data.metrics[c]), base, (cycles.get(c) or {}).get("init"), rungs(c),
                                {k: data.metric(c, "evaluate", k) for k in MASS_KEYS},
                                data.form_accuracy(c))
            for c in data.cycles if c != "base" and data.metrics.get(c)}
