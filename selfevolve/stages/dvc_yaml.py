"""``dvc.yaml`` generated from the stage registry, with each stage's code dependencies derived from
its imports.

DVC reruns a stage only when one of its ``deps`` changed, so a stage must depend on all the code it
runs. :func:`code_deps` finds it: the names the stage function uses (and the functions of its own
module that it calls) lead to the project modules it imports, at module level or inside the
function; from those, every project module they import, anywhere in the file, transitively; plus
the prompt folders those modules render templates from (``prompting.render("roles/...")``) and
the files beside them that they name (a program read as text, like the sandbox's child). Package
``__init__`` files that hold nothing but a docstring are left out, and so is the plumbing that
cannot change what a stage writes: the runner, the registry, this module, MLflow tracking, the
command line and the params schema (``selfevolve/config.py``). A stage reads params *values*, and
DVC tracks those in ``params.yaml`` through the stage's ``params`` (the registry's lists, checked
against every field each stage reads by ``tests/test_stage_params.py``); a new default is written
into ``params.yaml`` too (``tests/test_config.py``), so it reruns exactly the stages that read it,
where the schema as a file dependency reran every stage, the warm start included. Editing a parser,
template, reward or trainer therefore reruns exactly the stages whose code reaches it.

``render()`` is the file's text; ``selfevolve dvc-yaml`` writes it and a test fails when the
committed ``dvc.yaml`` differs.
"""

from __future__ import annotations

import ast
import inspect
import re
from functools import lru_cache
from pathlib import Path

import yaml

from selfevolve.paths import CyclePaths
from selfevolve.stages.placement import expand
from selfevolve.stages.registry import STAGES, Stage
from selfevolve.stages.shards import Shard, all_parts, shard_name

PACKAGE = "selfevolve"
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Modules that run around a stage but cannot change its outputs.
PLUMBING = ("selfevolve.stages.runner", "selfevolve.stages.registry", "selfevolve.stages.dvc_yaml", "selfevolve.stages.placement", "selfevolve.tracking",
            "selfevolve.cli", "selfevolve.orchestration", "selfevolve.config")
_RENDER_RE = re.compile(r"""prompting\.render\(\s*f?["']([\w-]+)/""")
_SIBLING_RE = re.compile(r"""["']([\w]+\.py)["']""")


def _module_path(module: str) -> Path | None:
    """The source file of a project module (``pkg/__init__.py`` for a package), else None."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    base = REPO_ROOT.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _is_plumbing(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PLUMBING)


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imported(node: ast.AST) -> dict[str, str]:
    """Bound name -> project module, for every import statement under ``node`` (a name bound to an
    attribute of a module maps to that module)."""
    out: dict[str, str] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            for a in n.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                out[f"<import>{a.name}"] = a.name
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            for a in n.names:
                sub = f"{n.module}.{a.name}"
                out[a.asname or a.name] = sub if _module_path(sub) else n.module
    return {k: v for k, v in out.items() if _module_path(v) is not None}


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _has_code(path: Path) -> bool:
    body = _tree(path).body
    return any(not (isinstance(s, ast.Expr) and isinstance(getattr(s, "value", None), ast.Constant)) for s in body)


def _closure(modules: set[str]) -> set[str]:
    """``modules`` and every project module they import (anywhere in their files), transitively;
    plus the packages above them, of which only the top level runs on import (so only their
    top-level imports are followed, in the same way)."""
    used: set[str] = set()
    imported: set[str] = set()
    todo = [(m, True) for m in modules]
    while todo:
        mod, is_used = todo.pop()
        if _is_plumbing(mod) or mod in used or (not is_used and mod in imported):
            continue
        (used if is_used else imported).add(mod)
        path = _module_path(mod)
        if path is None:
            continue
        tree = _tree(path)
        todo += [(m, is_used) for m in (_imported(tree) if is_used else _top_imports(tree)).values()]
        todo += [(p, False) for p in _parents(mod)]
    return used | imported


def _defs(tree: ast.Module) -> dict[str, ast.AST]:
    return {s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _top_imports(tree: ast.Module) -> dict[str, str]:
    return {k: v for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) for k, v in _imported(s).items()}


def _function_modules(fn) -> set[str]:
    """The project modules a stage function's code reaches directly: what the names it uses were
    imported from (at module level or inside it), recursively the same for the top-level
    functions and classes of its module that it refers to, and for the ``StageContext`` methods
    and properties it uses (``ctx.backend()`` reaches the backends; ``ctx.paths`` does not)."""
    from selfevolve.stages import context

    units = [(Path(inspect.getsourcefile(fn)).resolve(), fn.__name__, None)]
    ctx_tree = _tree(Path(context.__file__).resolve())
    ctx_class = _defs(ctx_tree)["StageContext"]
    ctx_members = {n.name: n for n in ctx_class.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    out: set[str] = set()
    seen: set[tuple[Path, str, str | None]] = set()
    while units:
        path, name, member = units.pop()
        if (path, name, member) in seen:
            continue
        seen.add((path, name, member))
        tree = _tree(path)
        defs, imports = _defs(tree), _top_imports(tree)
        node = ctx_members.get(member) if member else defs.get(name)
        if node is None:
            continue
        out |= set(_imported(node).values())
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                if n.id in imports:
                    out.add(imports[n.id])
                elif n.id in defs and not member:
                    units.append((path, n.id, None))
                elif member and n.id in _defs(ctx_tree):
                    units.append((path, n.id, None))
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("ctx", "self") \
                    and n.attr in ctx_members and (n.value.id == "ctx" or member):
                units.append((Path(context.__file__).resolve(), "StageContext", n.attr))
    return out


def code_deps(stage: Stage) -> list[str]:
    """The project files ``stage`` runs (see the module docstring), relative to the repository
    root, sorted: Python modules and prompt folders."""
    module, context = stage.run.__module__, "selfevolve.stages.context"
    files: set[str] = {_module_path(module).relative_to(REPO_ROOT).as_posix()}
    direct = _function_modules(stage.run) - {module}
    if context in direct:  # its methods were followed one by one; its own imports still run
        direct = (direct - {context}) | set(_top_imports(_tree(_module_path(context))).values())
        files.add(_module_path(context).relative_to(REPO_ROOT).as_posix())
    for mod in _closure(direct):
        path = _module_path(mod)
        if path is None or (path.name == "__init__.py" and not _has_code(path)):
            continue
        files.add(path.relative_to(REPO_ROOT).as_posix())
        text = path.read_text(encoding="utf-8")
        for folder in _RENDER_RE.findall(text):
            files.add(f"{PACKAGE}/prompts/{folder}")
        for name in _SIBLING_RE.findall(text):  # a program read as text and run elsewhere (the sandbox's child)
            if (path.parent / name).is_file() and name != path.name:
                files.add((path.parent / name).relative_to(REPO_ROOT).as_posix())
    return sorted(files)


def _path(spec: str, per_cycle: bool) -> str:
    """``"init.model"`` -> ``models/${item.init}`` (per-cycle stages) or ``models/base``."""
    which, attr = spec.split(".", 1)
    cycle = {"cycle": "${key}" if per_cycle else "base", "init": "${item.init}" if per_cycle else "base", "base": "base"}[which]
    return getattr(CyclePaths(Path("."), cycle), attr).as_posix()


def stage_entry(stage: Stage, shard: Shard | None = None, merge: int = 0) -> dict:
    """The ``dvc.yaml`` entry of one stage (inside ``foreach``/``do`` for per-cycle stages); for a
    sharded stage, of one shard (``shard``) or of the merge of ``merge`` parts."""
    cycle = "${key}" if stage.per_cycle else (stage.fixed_cycle or "base")
    cmd = f"selfevolve {stage.cli_name}" + (f" --cycle {cycle}" if stage.per_cycle or stage.fixed_cycle else "")
    outs = [_path(o, stage.per_cycle) for o in stage.outs]
    deps = [_path(d, stage.per_cycle) for d in stage.deps]
    if shard is not None:
        cmd += f" --shard {shard.index}/{shard.count}"
        outs = shard.parts(outs)
    elif merge:
        cmd += f" --merge {merge}"
        deps = all_parts(outs, merge)
    entry = {
        "cmd": cmd,
        "deps": deps + code_deps(stage),
        "params": [] if merge else list(stage.params),
        "outs": outs,
        # Metrics are cached like any output, so `dvc push` carries them to a second clone.
        "metrics": [CyclePaths(Path("."), cycle).metrics(shard_name(stage.metrics_file, shard)).as_posix()],
    }
    for key in ("deps", "params"):
        if not entry[key]:
            del entry[key]
    return {"foreach": "${cycles}", "do": entry} if stage.per_cycle else entry


HEADER = """\
# GENERATED by `selfevolve dvc-yaml` from the stage registry (selfevolve/stages/registry.py): edit
# the registry, not this file. The stage DAG: every stage runs the `selfevolve` CLI; Prefect tasks
# reproduce these same stages (`dvc repro --single-item <stage>`), so dvc.lock is the record.
# Cycles come from params.yaml `cycles` (a mapping name -> {init: previous cycle or base}).
# Code dependencies are each stage's imports (selfevolve/stages/dvc_yaml.py).
"""


def render(shards: dict[str, int] | None = None) -> str:
    """The text of ``dvc.yaml``: every registered stage (a stage with ``shards[name]`` > 1 as its
    shard entries ``<name>_shard_K`` and its merge entry ``<name>``), then the report's plots."""
    from selfevolve.reporting.series import DVC_PLOTS

    stages = {}
    for st in STAGES:
        for shard, merge in expand(st, (shards or {}).get(st.name, 1)):
            stages[shard_name(st.name, shard)] = stage_entry(st, shard, merge)
    doc = {"stages": stages, "plots": DVC_PLOTS}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=120)


def is_current(path: str | Path, shards: dict[str, int] | None = None) -> bool:
    """Whether the file at ``path`` is what :func:`render` generates for ``shards``."""
    path = Path(path)
    return path.is_file() and path.read_text(encoding="utf-8") == render(shards)


def write(path: str | Path = REPO_ROOT / "dvc.yaml", shards: dict[str, int] | None = None) -> Path:
    """Write :func:`render` to ``path`` and return it."""
    path = Path(path)
    path.write_text(render(shards), encoding="utf-8")
    return path
