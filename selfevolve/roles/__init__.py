"""The four SAGE roles (Challenger, Planner, Solver, Critic) sharing one backbone: prompt
templates (``prompts/*.j2``), rendering (``templates``) and tolerant output parsers (``parsers``)."""
