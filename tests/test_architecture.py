"""The shape of the house, checked from the code's own imports: lower floors never import higher
ones, no import cycles, files stay small, and everything that lists the stages derives from the
registry (``dvc.yaml`` included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Floors from the ground up (docs/design.md, "Layers", and the README's table; both checked against this list below): a
#: module may import its own floor or lower.
FLOORS: list[tuple[str, ...]] = [
    # 0: foundation
    ("selfevolve", "selfevolve.config", "selfevolve.inputs", "selfevolve.records", "selfevolve.paths", "selfevolve.runtime_env", "selfevolve.seeding",
     "selfevolve.stats", "selfevolve.prompting", "selfevolve.headline"),
    # 1: the domain: roles, rewards, questions, model backends, verifiers, tracking, local services
    ("selfevolve.roles", "selfevolve.rewards", "selfevolve.pool", "selfevolve.questions", "selfevolve.backends",
     "selfevolve.verifiers", "selfevolve.tracking", "selfevolve.model_registry", "selfevolve.orchestration"),
    # 2: engines built on the domain
    ("selfevolve.evaluation", "selfevolve.training", "selfevolve.mass", "selfevolve.embedded"),
    # 3: stages (read and write the campaign's files) and reports over those files
    ("selfevolve.stages", "selfevolve.reporting"),
    # 4: the command line
    ("selfevolve.cli", "selfevolve.__main__"),
    # 5: orchestration and measurements
    ("tasks", "flows", "benchmarks"),
]
#: Each of these imports only the foundation and itself.
ISOLATED = {"selfevolve.verifiers": "verifiers are pure: they grade text and run programs, and know no model or role"}
SOURCE_DIRS = ("selfevolve", "tasks", "flows", "benchmarks")
#: One program run inside the sandbox; it cannot import the package, so it is one file.
LONG_FILES_ALLOWED = {"selfevolve/verifiers/sandbox_child.py"}
MAX_LINES = 500


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py"))}


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Project modules imported anywhere in the file (lazy imports inside functions included)."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
        else:
            continue
        out |= {m for m in names if m in MODULES}
    return out


GRAPH = {m: _imports(p) - {m} for m, p in MODULES.items()}


def _floor(module: str) -> int:
    best, floor = -1, None
    for i, prefixes in enumerate(FLOORS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, floor = len(p), i
    if floor is None:
        raise AssertionError(f"module {module} is on no floor: add it to FLOORS in tests/test_architecture.py")
    return floor


def test_no_import_runs_from_a_lower_floor_to_a_higher_one():
    upward = [f"{m} (floor {_floor(m)}) imports {t} (floor {_floor(t)})" for m, ts in GRAPH.items() for t in ts
              if _floor(t) > _floor(m)]
    assert not upward, "\n".join(upward)


def test_isolated_packages_import_only_the_foundation():
    bad = []
    for prefix, why in ISOLATED.items():
        for m, ts in GRAPH.items():
            if m == prefix or m.startswith(prefix + "."):
                bad += [f"{m} imports {t}: {why}" for t in ts if _floor(t) > 0 and not t.startswith(prefix)]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


#: Where the package may run git, DVC or Prefect (imports or command lines); flows/, tasks/ and the
#: benchmarks are orchestration themselves.
ORCHESTRATION = "selfevolve.orchestration"
_TOOLS = {"git", "dvc", "prefect"}


def _tool_uses(path: Path) -> list[str]:
    """Where a file imports the dvc or prefect packages (or GitPython), or builds a command line that
    runs git, ``python -m dvc`` or the prefect CLI: ``["git", ...]``, ``[..., "-m", "dvc", ...]``,
    ``[BIN / "prefect", ...]``."""
    uses = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                 else [n.module] if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 else [])
        uses += [f"line {n.lineno}: imports {m}" for m in names if m.split(".")[0] in _TOOLS]
        if isinstance(n, ast.List) and n.elts:
            words = [e.value if isinstance(e, ast.Constant) else
                     e.right.value if isinstance(e, ast.BinOp) and isinstance(e.right, ast.Constant) else None for e in n.elts]
            if words[0] in _TOOLS or any(a == "-m" and b in _TOOLS for a, b in zip(words, words[1:])):
                uses.append(f"line {n.lineno}: runs {' '.join(str(w) for w in words[:4] if w)}")
    return uses


def test_git_dvc_and_prefect_are_called_only_from_the_orchestration_package():
    bad = [f"{m}: {u}" for m, p in MODULES.items() if m.startswith("selfevolve") and not m.startswith(ORCHESTRATION)
           for u in _tool_uses(p)]
    assert not bad, "\n".join(bad)
    assert _tool_uses(MODULES[f"{ORCHESTRATION}.git"]) and _tool_uses(MODULES[f"{ORCHESTRATION}.services"])  # the scan sees them


def test_files_stay_small():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in MODULES.values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES and p.relative_to(ROOT).as_posix() not in LONG_FILES_ALLOWED]
    assert not long, "\n".join(long)


def test_the_layer_check_would_catch_an_upward_import():
    """The rule is not vacuous: a verifier importing a stage is flagged."""
    assert _floor("selfevolve.stages.solve") > _floor("selfevolve.verifiers.grading")
    assert _floor("selfevolve.cli.stages") > _floor("selfevolve.stages.registry") > _floor("selfevolve.evaluation.solve")


# ------------------------------------------------------------------------------------------
# the stage list is written once
# ------------------------------------------------------------------------------------------


def test_dvc_yaml_is_what_the_registry_generates():
    from selfevolve.stages import dvc_yaml

    assert (ROOT / "dvc.yaml").read_text(encoding="utf-8") == dvc_yaml.render(), \
        "dvc.yaml is stale: run `selfevolve dvc-yaml` (a stage, its files or its imports changed)"


def test_registry_paths_params_commands_and_tasks_agree():
    import yaml
    from typer.main import get_command

    from selfevolve.cli import app
    from selfevolve.config import Params
    from selfevolve.paths import CyclePaths
    from selfevolve.stages.placement import stage_runs
    from selfevolve.stages.registry import STAGES

    params = Params().model_dump(mode="json")
    for s in STAGES:
        for spec in s.deps + s.outs:
            which, attr = spec.split(".", 1)
            assert which in ("cycle", "init", "base") and isinstance(getattr(CyclePaths(Path("."), "x"), attr), Path), spec
        for key in s.params:
            node = params
            for part in key.split("."):
                assert part in node, f"stage {s.name}: params key {key!r} is not in the schema"
                node = node[part]
        for name in s.artifacts:
            assert hasattr(CyclePaths(Path("."), "x"), name), (s.name, name)
    commands = set(get_command(app).commands)
    assert {s.cli_name for s in STAGES} <= commands
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    assert list(dvc["stages"]) == [s.name for s in STAGES]
    # the stage runs the flows dispatch are DVC's stages, in the registry's order
    runs = stage_runs(Params(), ["c1"])
    assert [r.group for r in runs] == [s.name for s in STAGES] and runs[-1].id == "evaluate@c1"


@pytest.mark.parametrize("name", ["verify", "rewards", "train_rl", "solve"])
def test_code_deps_follow_what_a_stage_runs(name):
    """Derived code dependencies: the verify stage depends on the verifiers but not on the Solver's
    prompt; the rewards stage on the reward formulas; training on the trainer; solving on the
    parsers and the role prompts, not on the trainer; none on the params schema."""
    from selfevolve.stages import dvc_yaml
    from selfevolve.stages.registry import get

    deps = set(dvc_yaml.code_deps(get(name)))
    expect = {
        "verify": ({"selfevolve/verifiers/grading.py", "selfevolve/verifiers/math.py", "selfevolve/verifiers/sandbox.py"},
                   {"selfevolve/prompts/roles", "selfevolve/training/rl.py"}),
        "rewards": ({"selfevolve/rewards.py", "selfevolve/pool.py"}, {"selfevolve/verifiers/math.py", "selfevolve/backends/hf.py"}),
        "train_rl": ({"selfevolve/training/rl.py", "selfevolve/evaluation/solve.py", "selfevolve/backends/hf.py"}, {"selfevolve/mass/search.py"}),
        "solve": ({"selfevolve/roles/parsers.py", "selfevolve/prompts/roles", "selfevolve/backends/hf.py"},
                  {"selfevolve/training/rl.py", "selfevolve/verifiers/math.py"}),
    }[name]
    assert expect[0] <= deps, expect[0] - deps
    assert not expect[1] & deps, expect[1] & deps
    # the params schema is not a dependency: the values are, as DVC params (tests/test_stage_params.py)
    assert "selfevolve/config.py" not in deps


_DOC_TABLES = (ROOT / "README.md", ROOT / "docs" / "design.md")


def _floor_rows(text: str) -> dict[int, set[str]]:
    """The layer table's rows of a doc (``| <floor> ...`` lines): floor -> the names in backticks,
    packages as ``name/``, without a leading ``selfevolve/``."""
    rows = {}
    for line in text.splitlines():
        if m := re.match(r"\| (\d) ", line):
            rows[int(m.group(1))] = {t.removeprefix("selfevolve/") for t in re.findall(r"`([^`]+)`", line)}
    return rows


def _doc_name(module: str) -> str | None:
    """How the layer tables name a module of FLOORS (``None``: the package itself and ``__main__``)."""
    if module in ("selfevolve", "selfevolve.__main__"):
        return None
    name = module.removeprefix("selfevolve.").replace(".", "/")
    return name + "/" if (ROOT / module.replace(".", "/")).is_dir() else name


@pytest.mark.parametrize("doc", _DOC_TABLES, ids=lambda p: p.name)
def test_the_layer_tables_in_the_docs_name_every_module_on_its_floor(doc):
    rows = _floor_rows(doc.read_text(encoding="utf-8"))
    assert sorted(rows) == list(range(len(FLOORS))), f"{doc.name}: layer table rows {sorted(rows)}"
    missing = [f"{name} (floor {i})" for i, modules in enumerate(FLOORS) for m in modules
               if (name := _doc_name(m)) and name not in rows[i]]
    assert not missing, f"{doc.name}'s layer table does not name: {', '.join(missing)}"
