"""The ``selfevolve`` command line: one subcommand per stage plus tools (grade, serve, evaluate, report).

Each stage subcommand is what ``dvc.yaml`` runs and what the Prefect tasks reproduce; run
``selfevolve COMMAND --help`` for its options. Heavy imports happen inside the commands so that
``selfevolve --help`` is instant.
"""

from __future__ import annotations

import typer

from selfevolve.runtime_env import apply_defaults  # noqa: E402

apply_defaults()

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
