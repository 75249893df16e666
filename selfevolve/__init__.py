"""selfevolve: self-evolution cycles (SAGE roles + MASS workflow search) for language models."""

__version__ = "0.1.0"
