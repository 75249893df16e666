"""Task-Relative REINFORCE++ advantages (SAGE paper; REINFORCE++: Hu 2025, arXiv:2501.03262): each
rollout's reward normalised within its *role* over the cycle's rollouts,
``A = (r - mean_role) / (std_role + eps)``, computed in the ``datasets`` stage so that they are
inspectable data rather than trainer internals."""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean, pstdev

from selfevolve.records import Rollout

def role_advantages(rollouts: list[Rollout], skip_no_spread: bool = True, eps: float = 1e-6) -> list[Rollout]:
    """Fill ``advantage`` by per-role normalisation (Task-Relative REINFORCE++).

    Groups of size > 1 (the Solver's n samples of one prompt) whose rewards are all equal carry
    no signal and are dropped when ``skip_no_spread``; roles whose rewards have no spread are
    dropped too. Returns the kept rollouts (copies), in input order.
    """
    groups = defaultdict(list)
    for r in rollouts:
        groups[r.group].append(r.reward)
    kept = [r for r in rollouts if not (skip_no_spread and len(groups[r.group]) > 1 and pstdev(groups[r.group]) == 0)]
    by_role = defaultdict(list)
    for r in kept:
        by_role[r.role].append(r.reward)
    out = []
    for r in kept:
        rs = by_role[r.role]
        sd = pstdev(rs) if len(rs) > 1 else 0.0
        if sd == 0:
            continue
        out.append(r.model_copy(update={"advantage": (r.reward - fmean(rs)) / (sd + eps)}))
    return out
