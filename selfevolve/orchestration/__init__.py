"""Talking to the machinery around the stages, in one place: git (``git``), child process groups
(``processes``), and the local services — Prefect server, workers and deployments, the MLflow
tracking server, the DVC remote (``services``).

The Prefect tasks and flows (``tasks/``, ``flows/``) and the command line use these; nothing else in
the package runs git, DVC or Prefect (``tests/test_architecture.py`` checks it).
"""
