"""Prefect tasks: one per pipeline stage, each reproducing its DVC stage (``tasks.stages``)."""
