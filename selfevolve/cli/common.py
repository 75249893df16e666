"""What every ``selfevolve`` command shares: the error exit, the handling of bad input, logging
set-up, params loading."""

from __future__ import annotations

import logging
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NoReturn

import typer

NOISY_LOGGERS = ("httpx", "urllib3", "mlflow", "alembic", "filelock", "git", "matplotlib")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a clear error on stderr and exit with ``code`` (no traceback)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


@contextmanager
def input_errors(verbose: bool = False) -> Iterator[None]:
    """Inside the block, bad input (``selfevolve.inputs.InputError``: params, a seeds, questions,
    benchmark or predictions file, a model folder or source) ends the command with its message
    (file, line, field, fix) and exit code 2, and so does a missing input file (an earlier stage's
    output not made yet); the traceback is printed only when ``verbose``."""
    from selfevolve.inputs import InputError

    try:
        yield
    except InputError as exc:
        if verbose:
            traceback.print_exc()
        fail(str(exc))
    except FileNotFoundError as exc:
        if verbose:
            traceback.print_exc()
        fail(f"{exc.filename or exc}: no such file; make it first (`dvc repro` runs the stages that write it)")


def setup_logging(verbose: bool = False, stderr: bool = False) -> None:
    """Rich log lines at INFO (DEBUG with ``verbose``), on stderr when stdout carries data (JSON)."""
    from rich.console import Console
    from rich.logging import RichHandler

    handler = RichHandler(console=Console(stderr=True) if stderr else None, rich_tracebacks=False, show_path=False)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", datefmt="[%X]",
                        handlers=[handler], force=True)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def load_params_or_fail(params_path: Path, overlays: list[Path] | None = None):
    """Validated params, or exit 2 with the schema's message (key, value, rule)."""
    from selfevolve.config import load_params

    with input_errors():
        return load_params(params_path, overlays=[str(o) for o in overlays or []])
