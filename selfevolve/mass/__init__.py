"""MASS workflow search ("Recursive Self-Improvement through Multi-Agent Self-Supervision",
SakanaAI; reference code SakanaAI/mass), extended with a population, verifier fitness and merges (docs/design.md, "MASS").

Modules:

- ``design``: workflow designs as data, guardrails (``validate_design``), the seed designs;
- ``parse``: tolerant parsing of model-written ``<design>`` blocks (``parse_design``);
- ``executor``: ``run_design`` runs a design on a batch of questions through a ``Backend``
  (batched across questions) and records ``Trajectory`` records;
- ``fitness``: verifier outcomes and pairwise self-judgement -> a design's fitness (``evaluate_design``);
- ``operators``: structural mutations and the structural merge (fallbacks for model proposals);
- ``search``: ``run_search`` (population evolution, champion per domain) and ``search_and_collect``
  (search + champion trajectories: what the ``mass_search`` stage runs);
- ``trajectories``: the champion run many times, verified runs kept (``collect_champion_trajectories``);
- ``sft_data``: kept trajectories -> SFT chats (``trajectories_to_chats``; pure conversion);
- ``benchmark``: the champion against the single agent on held-out questions.

Prompts: ``selfevolve/prompts/mass/`` (proposal, merge, pairwise judge).
"""
