"""Row converters of the named benchmarks: one function per file format, from a JSON row to a
``Question`` (gold answer or code spec, categories for per-category metrics), raising
``BenchmarkFormatError`` (file, line, field) for a malformed row. The formats are described in
``selfevolve.questions.benchmarks``."""

from __future__ import annotations

import logging
import re
from typing import Any, Callable

from selfevolve.records import CodeSpec, MathSpec, Question, RecordFileError

log = logging.getLogger(__name__)


MBPP_SPLITS: dict[str, tuple[int, int]] = {
    "prompt": (1, 10),
    "test": (11, 510),
    "validation": (511, 600),
    "train": (601, 974),
}


class BenchmarkFormatError(RecordFileError):
    """A benchmark file has a malformed row (carries ``path``, ``line``, ``field``)."""


# ------------------------------------------------------------------------------------------
# answer helpers (pure string code; no math-verify import needed to load benchmarks)
# ------------------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}`` in ``text`` (balanced braces) or None."""
    from selfevolve.verifiers.math import extract_answer

    return extract_answer(text, order=("boxed",))


def gsm8k_final_answer(solution: str) -> str | None:
    """The number after the last ``####`` of a GSM8K solution, thousands commas removed."""
    if "####" not in solution:
        return None
    tail = solution.rsplit("####", 1)[1].strip()
    ans = tail.splitlines()[0].strip() if tail else ""
    ans = ans.replace(",", "").replace("$", "").strip()
    return ans or None


def mbpp_split_of(task_id: int) -> str:
    """MBPP split of a task id (``prompt``/``test``/``validation``/``train``; ``other`` outside)."""
    for name, (lo, hi) in MBPP_SPLITS.items():
        if lo <= task_id <= hi:
            return name
    return "other"


_DEF_RE = re.compile(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


def mbpp_entry_point(code: str, tests: list[str]) -> str | None:
    names = _DEF_RE.findall(code or "")
    joined = "\n".join(tests)
    for name in names:
        if re.search(rf"\b{re.escape(name)}\s*\(", joined):
            return name
    return names[0] if names else None


# ------------------------------------------------------------------------------------------
# file reading
# ------------------------------------------------------------------------------------------



def need(row: dict, key: str, path: Any, line: int, kinds: type | tuple = str) -> Any:
    if key not in row or row[key] is None:
        raise BenchmarkFormatError(path, line, key, f"missing field (row has {sorted(row)[:12]})")
    val = row[key]
    if not isinstance(val, kinds):
        want = kinds.__name__ if isinstance(kinds, type) else "/".join(k.__name__ for k in kinds)
        raise BenchmarkFormatError(path, line, key, f"expected {want}, got {type(val).__name__}")
    return val


# ------------------------------------------------------------------------------------------
# row converters: (row, index, line, path) -> Question | None
# ------------------------------------------------------------------------------------------


def gsm8k_row(source: str) -> Callable[[dict, int, int, Any], Question]:
    def conv(row: dict, index: int, line: int, path: Any) -> Question:
        q = need(row, "question", path, line)
        sol = need(row, "answer", path, line)
        gold = gsm8k_final_answer(sol)
        if gold is None:
            raise BenchmarkFormatError(path, line, "answer", "no '#### <number>' final answer in the solution")
        return Question(
            id=str(index), domain="math", text=q, spec=MathSpec(answer=gold), source=f"benchmark:{source}",
            meta={"solution": sol},
        )

    return conv


def math500_row(row: dict, index: int, line: int, path: Any) -> Question:
    q = need(row, "problem", path, line)
    ans = need(row, "answer", path, line)
    level = row.get("level")
    level_i = int(level) if isinstance(level, (int, float)) or (isinstance(level, str) and level.isdigit()) else None
    meta = {"solution": row.get("solution", ""), "subject": row.get("subject"), "level": level_i, "categories": ["subject", "level"]}
    if row.get("unique_id"):
        meta["unique_id"] = row["unique_id"]
    return Question(id=str(index), domain="math", text=q, spec=MathSpec(answer=ans), level=level_i, source="benchmark:math500", meta=meta)


def math_level(level: Any) -> int | None:
    m = re.search(r"\d+", str(level or ""))
    return int(m.group(0)) if m else None


def math_train_row(row: dict, index: int, line: int, path: Any) -> Question | None:
    q = need(row, "problem", path, line)
    sol = need(row, "solution", path, line)
    gold = last_boxed(sol)
    if gold is None:
        # One MATH train solution (algebra/intermediate ... "there are $\\boxed{}$ primes") has an
        # empty box: it has no gold answer, so it cannot be graded; skip it (logged).
        log.warning("%s:%s: no non-empty \\boxed{} answer in the solution; question skipped", path, line)
        return None
    level = math_level(row.get("level"))
    qid = str(row["id"]) if row.get("id") is not None else str(index)
    meta = {"solution": sol, "type": row.get("type"), "level": level, "categories": ["type", "level"]}
    return Question(id=qid, domain="math", text=q, spec=MathSpec(answer=gold), level=level, source="benchmark:math-train", meta=meta)


def strip_dollars(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s.startswith("$") and s.endswith("$") and "$" not in s[1:-1]:
        return s[1:-1].strip()
    return s


def olympiad_row(row: dict, index: int, line: int, path: Any) -> Question:
    q = need(row, "question", path, line)
    finals = need(row, "final_answer", path, line, (list, str))
    if isinstance(finals, str):
        finals = [finals]
    if not finals or not all(isinstance(f, str) for f in finals):
        raise BenchmarkFormatError(path, line, "final_answer", "expected a non-empty list of strings")
    gold = ", ".join(strip_dollars(f) for f in finals)
    text = q if not row.get("context") else f"{row['context']}\n\n{q}"
    meta = {
        "solution": "\n\n".join(row.get("solution") or []) if isinstance(row.get("solution"), list) else (row.get("solution") or ""),
        "final_answer": finals,
        "unit": row.get("unit"),
        "is_multiple_answer": bool(row.get("is_multiple_answer")),
        "answer_type": row.get("answer_type"),
        "subfield": row.get("subfield"),
        "tolerance": row.get("error"),
        "categories": ["answer_type", "subfield"],
    }
    qid = str(row["id"]) if row.get("id") is not None else str(index)
    return Question(id=qid, domain="math", text=text, spec=MathSpec(answer=gold), source="benchmark:olympiadbench", meta=meta)


def humaneval_row(row: dict, index: int, line: int, path: Any) -> Question:
    tid = need(row, "task_id", path, line, (str, int))
    prompt = need(row, "prompt", path, line)
    entry = need(row, "entry_point", path, line)
    test = need(row, "test", path, line)
    canon = row.get("canonical_solution") or ""
    # two tests, as the sandbox counts them: the ``check`` definition, then ``check(entry_point)``
    spec = CodeSpec(entry_point=entry, tests=[test, f"check({entry})"], reference_solution=prompt + canon)
    return Question(id=str(tid), domain="code", text=prompt, spec=spec, source="benchmark:humaneval", meta={"prompt": prompt})


def mbpp_text(problem: str, tests: list[str]) -> str:
    return problem.strip() + "\nYour code should pass these tests:\n\n" + "\n".join(tests)


def mbpp_row(source: str, text_key: str) -> Callable[[dict, int, int, Any], Question]:
    def conv(row: dict, index: int, line: int, path: Any) -> Question:
        tid = need(row, "task_id", path, line, (int, str))
        problem = need(row, text_key, path, line)
        tests = need(row, "test_list", path, line, list)
        code = row.get("code") or ""
        if source == "mbpp-sanitized":
            setup = "\n".join(row.get("test_imports") or [])
        else:
            setup = row.get("test_setup_code") or ""
        spec = CodeSpec(
            entry_point=mbpp_entry_point(code, tests), tests=[str(t) for t in tests], setup=setup,
            reference_solution=code or None,
        )
        meta = {"problem": problem}
        if row.get("challenge_test_list"):
            meta["challenge_test_list"] = row["challenge_test_list"]
        return Question(id=str(tid), domain="code", text=mbpp_text(problem, spec.tests), spec=spec, source=f"benchmark:{source}",
                        split=mbpp_split_of(int(tid)), meta=meta)

    return conv
