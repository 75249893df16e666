"""Every repository path the docs and docstrings name exists: README.md, docs/*.md and every Python
file of the project are scanned for paths under the project's top-level folders (globs such as
``selfevolve/verifiers/math*.py`` must match at least one file). A renamed module whose old name
lingers in a docstring fails here."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("selfevolve", "tests", "benchmarks", "configs", "flows", "tasks", "docs", ".ci")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./*-]*[\w*])")


def _texts():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in ("selfevolve", "tests", "benchmarks", "flows", "tasks"):
        files += sorted((ROOT / top).rglob("*.py"))
    return {f: f.read_text(encoding="utf-8") for f in files}


def named_paths(text: str) -> set[str]:
    """Repository paths named in ``text`` (placeholders such as ``<cycle>`` or ``{name}`` skipped)."""
    out = set()
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if not any(ch in path for ch in "<>{}"):
            out.add(path)
    return out


def _exists(path: str) -> bool:
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


def test_every_path_named_in_docs_and_docstrings_exists():
    missing = sorted(f"{f.relative_to(ROOT)}: {p}" for f, text in _texts().items() for p in named_paths(text) if not _exists(p))
    assert not missing, "paths named but not in the repository:\n" + "\n".join(missing)


def test_the_scan_finds_paths_and_would_catch_a_missing_one():
    gone = "selfevolve/" + "roles/prompts/solver.j2"  # split so that this file does not name it
    found = named_paths(f"see `selfevolve/verifiers/math*.py` and ``{gone}``; models/<cycle>/x")
    assert found == {"selfevolve/verifiers/math*.py", gone}
    assert _exists("selfevolve/verifiers/math*.py") and not _exists(gone)
