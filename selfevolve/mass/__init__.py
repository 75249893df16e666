"""MASS workflow search (Zhou et al. 2025, "Multi-Agent Design: Optimizing Agents with Better Prompts
and Topologies"; reference implementation SakanaAI/mass), extended with a population, verifier
fitness and merges (DESIGN.md).

Modules:

- ``design``: workflow designs as data, guardrails (``validate_design``), seed designs, tolerant
  parsing of model-written ``<design>`` blocks (``parse_design``);
- ``executor``: ``run_design`` runs a design on a batch of questions through a ``Backend``
  (batched across questions) and records ``Trajectory`` records;
- ``operators``: structural mutations and the structural merge (fallbacks for model proposals);
- ``search``: ``run_search`` (population evolution, champion per domain) and ``run_mass_stage``
  (the pipeline stage: search + champion trajectories);
- ``sft_data``: champion trajectories -> SFT chats (``trajectories_to_chats``);
- ``prompts/*.j2``: the proposal, merge and pairwise-judge prompts.
"""
