"""Registration of every ``selfevolve`` subcommand (imported by ``selfevolve.cli``)."""

from __future__ import annotations

# Each import registers the commands of one concern on selfevolve.cli.app.
from selfevolve.stages import cli as _stages_cli  # noqa: F401
from selfevolve.backends import cli as _backends_cli  # noqa: F401
from selfevolve.verifiers import cli as _verifiers_cli  # noqa: F401
from selfevolve.evaluation import cli as _evaluation_cli  # noqa: F401
