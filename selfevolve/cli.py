"""The ``selfevolve`` command line: one subcommand per stage plus tools (grade, serve, evaluate, report).

Each stage subcommand is what ``dvc.yaml`` runs and what the Prefect tasks reproduce; run
``selfevolve COMMAND --help`` for its options. Heavy imports happen inside the commands so that
``selfevolve --help`` is instant.
"""

from __future__ import annotations

import os

import typer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# torch's OpenMP threads spin while waiting; on 2 shared cores that made generation 10-70x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

app = typer.Typer(
    help="Self-evolution cycles for a language model: SAGE roles, MASS workflow search, verifiers, "
    "training and evaluation. Stages read params.yaml and write files under data/ and models/.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def fail(message: str, code: int = 2) -> None:
    """Print a clear error on stderr and exit with ``code`` (no traceback)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


# Commands are defined in the modules below; each module adds its commands to ``app``.
# Keep one module per concern; register it here.
from selfevolve import cli_commands  # noqa: E402,F401
