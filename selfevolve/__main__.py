"""``python -m selfevolve`` = the ``selfevolve`` command."""
from selfevolve.cli import app

app()
