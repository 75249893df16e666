"""MASS workflow search: a population of designs evolved by the model itself, with verifiers as fitness.

What the reference does (MASS ("Recursive Self-Improvement through Multi-Agent Self-Supervision", SakanaAI; reference code SakanaAI/mass)): sequential refinement per task.
Run the current design, judge it pairwise against a single-agent run of the bare task, let the same
model rewrite the design from the run's evidence, keep a champion, and when the champion is older
than the current design ask the model to combine their strengths. Guardrails are validity checks
(the design block parses, characters/4 fits the window).

What we do (docs/design.md "MASS"), per domain of the questions:

- generation 0: the seed designs (single agent, SAGE planner->solver, planner->solver with an
  acceptance gate) and the previous cycle's champion, padded with structural mutations to
  ``population``; each is evaluated on the same sample of ``eval_questions`` questions;
- generations 1..G: ``population`` children. Parents are picked by 2-way tournaments; each child is
  first *proposed by the model* (``prompts/propose.j2``: the parent's design JSON and the evidence of
  its runs: verifier outcomes, failures, output tokens per agent, the champion), parsed from a
  ``<design>`` block and checked by the guardrails; when that fails (with a tiny model it nearly
  always does) a structural operator (``operators.mutate``) makes the child instead. When the
  champion is older than the newest generation, one slot is a merge of the champion with the best
  newer design (model first via ``prompts/merge.j2``, ``operators.merge_designs`` as fallback);
- the next population is the best ``population`` of parents and children (elitism); the champion
  changes only when a design is strictly fitter (ties keep the incumbent);
- confirmation: the final champion and the single agent run on ``confirm_questions`` further pool
  questions; the champion is kept only if it is strictly fitter there, else the single agent is
  champion (a held-out check against a champion that overfits its small fitness sample).

Fitness of a design (``selfevolve.mass.fitness``) = mean per-run score on the sample, where a run's score is the verifier's
outcome (the injected ``verify_fn``) or, for questions the verifier cannot decide (``None``), a
pairwise self-judgement against the single-agent reference with A/B order swapped
(``prompts/judge.j2``; win 1, tie or unparseable 0.5, loss 0, averaged over both orders); minus
``cost_weight`` x mean output tokens per run / 1000 when ``cost_weight`` > 0. Reported beside it:
accuracy per 1,000 output tokens (the reference's "performance per output token").
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from selfevolve.backends.base import Backend, SamplingConfig
from selfevolve.config import MassParams
from selfevolve.mass.design import (
    MESSAGE_OVERHEAD_TOKENS,
    DesignLimits,
    WorkflowDesign,
    seed_designs,
    single_agent,
    validate_design,
)
from selfevolve.mass.executor import ExecutionResult
from selfevolve.mass.fitness import DesignEvaluation, evaluate_design, render_prompt
from selfevolve.mass.operators import merge_designs, mutate
from selfevolve.mass.parse import design_from_obj, parse_design
from selfevolve.records import Question, Trajectory
from selfevolve.seeding import derive_seed
from selfevolve.verifiers.grading import VerifyFn


class SearchResult(BaseModel):
    """Output of :func:`run_search`.

    ``champions``: domain -> champion design (carry into the next cycle's ``previous_champions``);
    ``champion_evaluations``: domain -> its evaluation; ``evaluated``: every design evaluated, in
    order; ``history``: one record per (domain, generation); ``rejected``: proposals and seeds that
    failed the guardrails, with the reason; ``limits``: domain -> the ``DesignLimits`` fields used
    (after calibration; ``DesignLimits(**result.limits[d])`` rebuilds them).
    """

    model_config = ConfigDict(extra="forbid")

    champions: dict[str, WorkflowDesign]
    champion_evaluations: dict[str, DesignEvaluation]
    evaluated: list[DesignEvaluation]
    history: list[dict[str, Any]]
    rejected: list[dict[str, str]]
    limits: dict[str, dict[str, float]] = Field(default_factory=dict)
    confirmation: dict[str, dict[str, Any]] = Field(default_factory=dict)
    seed: int = 0

    def team(self, domain: str) -> WorkflowDesign | None:
        """The design whose reach is probed for distillation (``selfevolve.mass.distill``): the
        domain's champion, or, where the single agent is champion, the candidate the confirmation
        refused or (no confirmation: the search kept one pass itself) the fittest team evaluated;
        None without a champion. The fitness and confirmation samples are pool questions nearly all
        within one pass's reach; the distillation asks, per ladder form on many fresh questions,
        whether a team answers what one pass cannot (measured: a split team that tied one pass
        0.453 / 0.453 on 64 confirmation questions; seed 0's c4 search kept one pass on a tie, 0.8125
        each, and nothing was probed). A team that wins no form distils nothing."""
        champion = self.champions.get(domain)
        if champion is None or champion.design_id != single_agent(domain).design_id:
            return champion
        refused = (self.confirmation.get(domain) or {}).get("candidate")
        teams = [e for e in self.evaluated if e.domain == domain and (e.design_id == refused if refused else len(e.design.agents) > 1)]
        return max(teams, key=lambda e: e.fitness).design if teams else champion

    def summary(self) -> dict[str, Any]:
        """Flat metrics per domain (for MLflow): champion id, fitness, accuracy, accuracy per 1k tokens,
        and the single-agent reference's numbers."""
        out: dict[str, Any] = {}
        for dom, ev in self.champion_evaluations.items():
            ref = next((e for e in self.evaluated if e.domain == dom and e.design_id == single_agent(dom).design_id), None)
            out[dom] = {
                "champion": ev.design_id, "fitness": ev.fitness, "accuracy": ev.accuracy,
                "accuracy_per_1k_tokens": ev.accuracy_per_1k_tokens, "mean_output_tokens": ev.mean_output_tokens,
                "single_agent_fitness": ref.fitness if ref else None, "single_agent_accuracy": ref.accuracy if ref else None,
                "single_agent_accuracy_per_1k_tokens": ref.accuracy_per_1k_tokens if ref else None,
                "designs_evaluated": sum(1 for e in self.evaluated if e.domain == dom),
            }
        return out

# ----------------------------------------------------------------------------------------
# the search
# ----------------------------------------------------------------------------------------
class _DomainSearch:
    def __init__(self, backend: Backend, domain: str, questions: list[Question], params: MassParams, verify_fn: VerifyFn | None,
                 seed: int, sampling: SamplingConfig, proposal_sampling: SamplingConfig, max_model_len: int,
                 log: Callable[[str], None]):
        self.backend, self.domain, self.params, self.verify_fn = backend, domain, params, verify_fn
        self.seed, self.sampling, self.proposal_sampling, self.log = seed, sampling, proposal_sampling, log
        self.rng = random.Random(f"mass:{seed}:{domain}")
        pool = sorted(questions, key=lambda q: q.id)
        k = min(params.eval_questions, len(pool))
        self.questions = self.rng.sample(pool, k)
        rest = [q for q in pool if q not in self.questions]
        self.confirm_questions = self.rng.sample(rest, min(params.confirm_questions, len(rest)))
        self.confirmation: dict[str, Any] = {}
        self.limits = DesignLimits.from_params(params, max_model_len=max_model_len, max_new_tokens=sampling.max_new_tokens,
                                               question_chars=max(len(q.text) for q in self.questions))
        self.cache: dict[str, DesignEvaluation] = {}
        self.order: list[str] = []
        self.rejected: list[dict[str, str]] = []
        self.reference: tuple[WorkflowDesign, ExecutionResult] | None = None
        self.history: list[dict[str, Any]] = []
        self.proposal_calls = 0

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, design: WorkflowDesign, generation: int, check_limits: bool = True) -> DesignEvaluation:
        if design.design_id in self.cache:
            return self.cache[design.design_id]
        ev, res = evaluate_design(self.backend, design, self.questions, verify_fn=self.verify_fn, limits=self.limits,
                                  sampling=self.sampling, cost_weight=self.params.cost_weight,
                                  seed=derive_seed(self.seed, self.domain, design.design_id), generation=generation,
                                  reference=self.reference, check_limits=check_limits)
        if self.reference is None and design.design_id == single_agent(self.domain).design_id:
            self.reference = (design, res)
        self.cache[design.design_id] = ev
        self.order.append(design.design_id)
        self.log(f"[mass {self.domain} g{generation}] {design.design_id} ({design.origin}) fitness={ev.fitness:.3f} "
                 f"acc={ev.accuracy} tokens/run={ev.mean_output_tokens:.1f}")
        return ev

    def _reject(self, origin: str, reason: str, generation: int) -> None:
        self.rejected.append({"domain": self.domain, "generation": str(generation), "origin": origin, "reason": reason[:500]})

    @staticmethod
    def _rank_key(ev: DesignEvaluation, pos: int) -> tuple:
        return (-ev.fitness, ev.generation, ev.mean_output_tokens, pos)

    def _best(self, evs: list[DesignEvaluation]) -> list[DesignEvaluation]:
        pos = {d: i for i, d in enumerate(self.order)}
        return sorted(evs, key=lambda e: self._rank_key(e, pos[e.design_id]))

    # -- model proposals ---------------------------------------------------------------------
    def _ask_model(self, prompts: list[str]) -> list[str | None]:
        """One batched proposal call; ``None`` for prompts that do not fit the context window (by the
        estimate, or because the backend reported no room to generate)."""
        out: list[str | None] = [None] * len(prompts)
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            room = self.limits.max_model_len - self.limits.conversation_tokens([{"role": "user", "content": p}])
            cap = min(self.proposal_sampling.max_new_tokens, room)
            if cap >= 32:
                groups.setdefault(cap, []).append(i)
        for cap in sorted(groups, reverse=True):
            idx = groups[cap]
            cfg = self.proposal_sampling.model_copy(update={"max_new_tokens": cap, "n": 1,
                                                           "seed": derive_seed(self.seed, self.domain, "propose", self.proposal_calls)})
            res = self.backend.chat([[{"role": "user", "content": prompts[i]}] for i in idx], cfg)
            self.proposal_calls += 1
            if len(res) != len(idx) or any(len(r) != 1 for r in res):
                raise RuntimeError("backend broke the Backend contract during design proposals")
            for i, r in zip(idx, res):
                c = r[0]
                if c.finish_reason == "length" and c.output_tokens == 0:
                    continue  # the backend found no room to generate: the prompt did not fit after all
                out[i] = c.text if isinstance(c.text, str) else ""
        return out

    def _propose_prompt(self, ev: DesignEvaluation, champion: DesignEvaluation) -> str:
        return render_prompt("propose", domain=self.domain, limits=self.limits, ev=ev, design_json=ev.design.structure_json(),
                             failures=ev.failures[:3],
                             champion_json=champion.design.structure_json() if champion.design_id != ev.design_id else "",
                             champion_fitness=champion.fitness)

    def _merge_prompt(self, a: DesignEvaluation, b: DesignEvaluation) -> str:
        return render_prompt("merge", domain=self.domain, limits=self.limits, a_json=a.design.structure_json(),
                             a_fitness=a.fitness, a_tokens=a.mean_output_tokens, b_json=b.design.structure_json(),
                             b_fitness=b.fitness, b_tokens=b.mean_output_tokens)

    def _accept(self, text: str | None, origin: str, parents: list[str], seen: set[str], generation: int
                ) -> WorkflowDesign | None:
        if text is None:
            self._reject(origin, f"proposal prompt does not fit the context window (characters/{self.limits.chars_per_token:g})",
                         generation)
            return None
        design, reason = parse_design(text, self.domain, origin=origin)
        if design is None:
            self._reject(origin, reason, generation)
            return None
        design = design.model_copy(update={"parents": parents})
        ok, reason = validate_design(design, self.limits)
        if not ok:
            self._reject(origin, reason, generation)
            return None
        if design.design_id in seen:
            self._reject(origin, f"duplicate of {design.design_id}", generation)
            return None
        return design

    # -- generations -------------------------------------------------------------------------
    def _calibrate(self, res: ExecutionResult) -> None:
        """Lower ``chars_per_token`` to what the backend's own prompt-token counts show (first turns of
        the reference runs), when its tokenizer packs fewer characters per token than the estimate
        assumes; the guardrails then stay honest for small vocabularies. Never raises it."""
        chars = tokens = 0
        for t in res.trajectories:
            if len(t.messages) >= 2 and t.messages[1].prompt_tokens > MESSAGE_OVERHEAD_TOKENS:
                chars += len(t.messages[0].content)
                tokens += t.messages[1].prompt_tokens - MESSAGE_OVERHEAD_TOKENS
        if chars and tokens:
            ratio = math.floor(10 * chars / tokens) / 10
            if 0.5 <= ratio < self.limits.chars_per_token:
                self.log(f"[mass {self.domain}] context estimate calibrated: {ratio:g} characters per token")
                self.limits = dataclasses.replace(self.limits, chars_per_token=ratio)

    def initial(self, previous: Any) -> list[DesignEvaluation]:
        # the single-agent reference is evaluated first (unverifiable runs are judged against it),
        # within the run-time limits even when over the static estimate; its runs calibrate the
        # context estimate before any other design is checked
        ref = single_agent(self.domain)
        ref_ok = validate_design(ref, self.limits)[0]
        evs = [self.evaluate(ref, 0, check_limits=ref_ok)]
        if self.reference is not None:
            self._calibrate(self.reference[1])
        cands: list[WorkflowDesign] = []
        if previous is not None:
            if isinstance(previous, WorkflowDesign):
                prev, reason = previous, "ok"
            else:
                prev, reason = design_from_obj(previous, self.domain, origin="previous")
            if isinstance(previous, dict) and previous.get("domain", self.domain) != self.domain:
                prev, reason = None, f"previous champion is for domain {previous.get('domain')!r}, not {self.domain!r}"
            if prev is not None and prev.domain != self.domain:
                prev, reason = None, f"previous champion is for domain {prev.domain!r}, not {self.domain!r}"
            if prev is not None:
                prev = prev.model_copy(update={"origin": "previous"})
                ok, reason = validate_design(prev, self.limits)
                if not ok:
                    prev = None
            if prev is None:
                self._reject("previous", reason, 0)
            else:
                cands.append(prev)
        for d in seed_designs(self.domain, self.params.seed_designs):
            ok, reason = validate_design(d, self.limits)
            if ok:
                cands.append(d)
            else:
                self._reject(f"seed:{d.name}", reason, 0)
        seen = {ref.design_id}
        for d in cands:
            if d.design_id not in seen and len(evs) < self.params.population:
                seen.add(d.design_id)
                evs.append(self.evaluate(d, 0))
        pool = [d for d in cands] or [ref]
        attempts = 0
        while len(evs) < self.params.population and attempts < 4 * self.params.population:
            attempts += 1
            child, _ = mutate(self.rng.choice(pool), self.rng, self.limits, seen)
            if child is None:
                continue
            seen.add(child.design_id)
            evs.append(self.evaluate(child, 0))
        return evs

    def _incumbent_first(self, evs: list[DesignEvaluation], previous_present: bool) -> DesignEvaluation:
        """Best of generation 0; ties go to the previous champion, then to evaluation order."""
        best = max(e.fitness for e in evs)
        tied = [e for e in evs if e.fitness >= best - 1e-12]
        if previous_present:
            prev = [e for e in tied if e.origin == "previous"]
            if prev:
                return prev[0]
        return self._best(tied)[0]

    def run(self, previous: Any) -> DesignEvaluation:
        pop = self.initial(previous)
        champion = self._incumbent_first(pop, previous is not None)
        pop = self._best(pop)[: self.params.population]
        self._record(0, champion, pop, [], {})
        for g in range(1, self.params.generations + 1):
            seen = set(self.cache)
            stats = {"model_proposals": 0, "model_accepted": 0, "fallback_mutations": 0, "merges": 0, "model_merges": 0}
            slots = self.params.population
            children: list[WorkflowDesign] = []
            # MASS "combine strengths": champion older than the newest designs -> merge with the best of them
            newest = [self.cache[d] for d in self.order if self.cache[d].generation == g - 1 and d != champion.design_id]
            merge_with = self._best(newest)[0] if newest and champion.generation < g - 1 else None
            parents = [self._tournament(pop) for _ in range(slots - (1 if merge_with else 0))]
            prompts = [self._propose_prompt(p, champion) for p in parents]
            if merge_with is not None:
                prompts.append(self._merge_prompt(champion, merge_with))
            texts = self._ask_model(prompts)
            stats["model_proposals"] = sum(t is not None for t in texts)
            for p, text in zip(parents, texts):
                child = self._accept(text, "model", [p.design_id], seen, g)
                if child is not None:
                    stats["model_accepted"] += 1
                else:
                    child, reasons = mutate(p.design, self.rng, self.limits, seen)
                    for r in reasons[:3]:
                        self._reject("mutation", r, g)
                    if child is not None:
                        stats["fallback_mutations"] += 1
                if child is not None:
                    seen.add(child.design_id)
                    children.append(child)
            if merge_with is not None:
                child = self._accept(texts[-1], "model-merge", [champion.design_id, merge_with.design_id], seen, g)
                if child is not None:
                    stats["model_merges"] += 1
                else:
                    child = merge_designs(champion.design, merge_with.design, self.limits, seen)
                if child is not None:
                    stats["merges"] += 1
                    seen.add(child.design_id)
                    children.append(child)
            child_evs = [self.evaluate(c, g) for c in children]
            merged = {e.design_id: e for e in pop + child_evs}
            pop = self._best(list(merged.values()))[: self.params.population]
            best_new = self._best(child_evs)[0] if child_evs else None
            if best_new is not None and best_new.fitness > champion.fitness + 1e-12:
                champion = best_new
            self._record(g, champion, pop, child_evs, stats)
        return self.confirm(champion)

    def confirm(self, champion: DesignEvaluation) -> DesignEvaluation:
        """Held-out check before a design is kept as champion: the search's champion and the
        single-agent reference run on ``confirm_questions`` pool questions outside the fitness
        sample, and the champion keeps the title only if it is strictly fitter there; on a tie
        the single agent (the simpler, cheaper design) is champion. A design picked on a
        16-question sample can overfit it (measured on the default campaign's base model: a
        planner->solver champion 0.315 vs the single agent's 0.445 on 200 held-out questions, at
        2.3x the tokens; it tied the single agent on 16 confirmation questions). Returns the kept
        evaluation (its fitness-sample evaluation)."""
        ref = self.cache.get(single_agent(self.domain).design_id)
        if not self.confirm_questions or ref is None or champion.design_id == ref.design_id:
            return champion
        seed = derive_seed(self.seed, self.domain, "confirm")
        ref_ev, ref_res = evaluate_design(self.backend, ref.design, self.confirm_questions, verify_fn=self.verify_fn,
                                          limits=self.limits, sampling=self.sampling, cost_weight=self.params.cost_weight,
                                          seed=seed, check_limits=False)
        ch_ev, _ = evaluate_design(self.backend, champion.design, self.confirm_questions, verify_fn=self.verify_fn,
                                   limits=self.limits, sampling=self.sampling, cost_weight=self.params.cost_weight, seed=seed,
                                   reference=(ref.design, ref_res))
        kept = champion if ch_ev.fitness > ref_ev.fitness + 1e-12 else ref
        self.confirmation = {"questions": len(self.confirm_questions), "candidate": champion.design_id, "kept": kept.design_id,
                             "candidate_confirm_fitness": ch_ev.fitness, "single_agent_confirm_fitness": ref_ev.fitness,
                             "candidate_confirm_tokens": ch_ev.mean_output_tokens,
                             "single_agent_confirm_tokens": ref_ev.mean_output_tokens}
        self.log(f"[mass {self.domain}] confirmation on {len(self.confirm_questions)} held-out pool questions: "
                 f"{champion.design_id} {ch_ev.fitness:.3f} vs single agent {ref_ev.fitness:.3f} -> champion {kept.design_id}")
        return kept

    def _tournament(self, pop: list[DesignEvaluation]) -> DesignEvaluation:
        if len(pop) == 1:
            return pop[0]
        a, b = self.rng.sample(pop, 2)
        return self._best([a, b])[0]

    def _record(self, g: int, champion: DesignEvaluation, pop: list[DesignEvaluation], children: list[DesignEvaluation],
                stats: dict[str, int]) -> None:
        self.history.append({
            "domain": self.domain, "generation": g, "champion": champion.design_id,
            "champion_fitness": champion.fitness, "champion_accuracy": champion.accuracy,
            "champion_accuracy_per_1k_tokens": champion.accuracy_per_1k_tokens,
            "champion_mean_output_tokens": champion.mean_output_tokens,
            "best_child_fitness": max((c.fitness for c in children), default=None),
            "population": [e.design_id for e in pop], "population_fitness": [e.fitness for e in pop],
            "children": len(children), "rejected_total": len(self.rejected),
            "chars_per_token": self.limits.chars_per_token, **stats,
        })


def run_search(backend: Backend, questions: Sequence[Question], params: MassParams, verify_fn: VerifyFn | None, seed: int = 0,
               previous_champions: Mapping[str, WorkflowDesign | dict] | None = None, *,
               sampling: SamplingConfig | None = None, max_model_len: int = 512,
               proposal_sampling: SamplingConfig | None = None, log: Callable[[str], None] | None = None) -> SearchResult:
    """Evolve workflow designs per domain and return the champions.

    Args:
        backend: serves every agent, proposal and judgement (the model improves its own workflows).
        questions: the pool (``Question`` records; any mix of domains). Per domain, a fixed sample of
            ``params.eval_questions`` (seeded) is the fitness set for every design.
        params: ``config.MassParams`` (generations, population, eval_questions, max_agents, max_calls,
            max_tokens_per_run, cost_weight).
        verify_fn: ``(questions, answers) -> [score in [0,1] or None]`` (the stage passes the math
            grader / code sandbox); ``None`` judges every run pairwise against the single agent.
        seed: makes sampling of questions, parents, operators and backend seeds deterministic.
        previous_champions: domain -> design (or its JSON dict) from the previous cycle; it joins
            generation 0 and keeps the title on ties.
        sampling: the design runs' ``SamplingConfig`` (default greedy, 96 new tokens); its ``max_new_tokens`` is also the per-call allowance the guardrails use.
        max_model_len: the context window the budget check uses (``ModelParams.max_model_len``).
        proposal_sampling: for model proposals/merges (default temperature 1.0, up to 512 new tokens,
            cut to the room left in the window).
        log: optional progress callback (one line per evaluated design).

    Returns a :class:`SearchResult`. Raises ``ValueError`` if ``questions`` is empty or ``verify_fn``
    returns the wrong number of scores; ``RuntimeError`` if the backend breaks its contract.
    """
    if not questions:
        raise ValueError("run_search needs at least one question")
    sampling = sampling or SamplingConfig(temperature=0.0, max_new_tokens=96)
    proposal_sampling = proposal_sampling or SamplingConfig(temperature=1.0, max_new_tokens=512)
    log = log or (lambda _msg: None)
    previous_champions = dict(previous_champions or {})
    champions, champ_evs, evaluated, history, rejected, limits, confirmation = {}, {}, [], [], [], {}, {}
    for domain in sorted({q.domain for q in questions}):
        search = _DomainSearch(backend, domain, [q for q in questions if q.domain == domain], params, verify_fn, seed,
                               sampling, proposal_sampling, max_model_len, log)
        champ = search.run(previous_champions.get(domain))
        champions[domain] = champ.design
        champ_evs[domain] = champ
        evaluated += [search.cache[d] for d in search.order]
        history += search.history
        rejected += search.rejected
        if search.confirmation:
            confirmation[domain] = search.confirmation
        limits[domain] = dataclasses.asdict(search.limits)
    return SearchResult(champions=champions, champion_evaluations=champ_evs, evaluated=evaluated, history=history,
                        rejected=rejected, limits=limits, confirmation=confirmation, seed=seed)


# ----------------------------------------------------------------------------------------
# search + champion trajectories (what the mass_search stage runs)
# ----------------------------------------------------------------------------------------
class MassOutcome(BaseModel):
    """What :func:`search_and_collect` found: the search result, the champion trajectories kept for
    SFT (completed and verified correct) and flat numeric metrics for MLflow."""

    model_config = ConfigDict(extra="forbid")

    result: SearchResult
    trajectories: list[Trajectory]
    metrics: dict[str, float]

    def champions_json(self) -> dict[str, Any]:
        """domain -> champion design as JSON (the next cycle's ``previous_champions``)."""
        return {d: c.model_dump(mode="json") for d, c in self.result.champions.items()}


def search_and_collect(backend: Backend, pool: Sequence[Question], mass: MassParams, verify_fn: VerifyFn | None, *,
                       sampling: SamplingConfig, max_model_len: int, seed: int = 0,
                       previous_champions: Mapping[str, Any] | None = None) -> MassOutcome:
    """Search (:func:`run_search` with ``mass``: greedy design runs of ``sampling.max_new_tokens``
    in a window of ``max_model_len`` tokens), then each domain's champion runs
    ``mass.trajectories_per_question`` times on every pool question of its domain at ``sampling``
    (temperature, top_p; each call's ``n`` and seed are the executor's), and completed runs the
    verifier accepted are kept for SFT
    (``trajectories.select_for_sft``). Raises ``ValueError`` for an empty pool.
    """
    from selfevolve.mass.trajectories import collect_champion_trajectories, select_for_sft

    pool = list(pool)
    result = run_search(backend, pool, mass, verify_fn, seed=seed, previous_champions=previous_champions,
                        sampling=SamplingConfig(temperature=0.0, max_new_tokens=sampling.max_new_tokens),
                        max_model_len=max_model_len)
    limits = {}
    for dom, fields in result.limits.items():
        fields = dict(fields, question_chars=max([len(q.text) for q in pool if q.domain == dom] or [1]))
        limits[dom] = DesignLimits(**fields)
    trajs = collect_champion_trajectories(
        backend, result.champions, pool, verify_fn, samples=mass.trajectories_per_question, limits=limits,
        sampling=sampling, seed=seed)
    kept = select_for_sft(trajs)
    metrics: dict[str, float] = {"mass_questions": float(len(pool)), "mass_trajectories": float(len(trajs)),
                                 "mass_trajectories_kept": float(len(kept)), "mass_designs_evaluated": float(len(result.evaluated)),
                                 "mass_rejected": float(len(result.rejected))}
    for dom, row in result.summary().items():
        for k in ("fitness", "accuracy", "accuracy_per_1k_tokens", "mean_output_tokens", "single_agent_fitness",
                  "single_agent_accuracy", "single_agent_accuracy_per_1k_tokens"):
            if row.get(k) is not None:
                metrics[f"mass_{dom}_{k}"] = float(row[k])
        metrics[f"mass_{dom}_champion_is_single_agent"] = float(row["champion"] == single_agent(dom).design_id)
    metrics["mass_model_proposals_accepted"] = float(sum(h.get("model_accepted", 0) + h.get("model_merges", 0) for h in result.history))
    return MassOutcome(result=result, trajectories=kept, metrics=metrics)
