"""Registration of every ``selfevolve`` subcommand (imported by ``selfevolve.cli``)."""

from __future__ import annotations

# Each import registers the commands of one concern on selfevolve.cli.app.
