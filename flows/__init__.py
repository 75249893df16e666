"""Prefect flows: thin composition of the stage tasks (campaign, cycle, evaluation)."""
