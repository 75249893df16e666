"""Prefect flows: thin composition of the stage tasks (campaign, cycle, evaluation)."""

from selfevolve.runtime_env import apply_defaults

apply_defaults()  # before Prefect reads its settings
