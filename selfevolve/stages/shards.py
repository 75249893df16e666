"""Shards of a stage: one stage's rows split into N contiguous parts that run on different workers
and are joined back in order.

A sharded stage runs as N shard runs (``selfevolve solve --cycle c1 --shard 0/2``), each writing
its part beside the output (``data/cycles/c1/shards/attempts.0-of-2.jsonl``), then one merge run
(``--merge 2``) that concatenates the parts' bytes in shard order into the stage's output. A shard
takes a contiguous range of the stage's *units* (the Solver's seeded generation blocks, the
Verifier's attempts), and each unit's rows depend only on the unit, so the merged file is
byte-identical to the unsharded one for any shard count (tests/test_shards.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from selfevolve.records import read_jsonl, write_jsonl

R = TypeVar("R")
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (self.count >= 1 and 0 <= self.index < self.count):
            raise ValueError(f"shard {self.index}/{self.count}: need 0 <= index < count and count >= 1")

    @classmethod
    def parse(cls, spec: str) -> "Shard":
        """``"K/N"`` -> ``Shard(K, N)``. Raises ``ValueError`` naming the form for anything else."""
        m = _SPEC.match(spec or "")
        if not m:
            raise ValueError(f"--shard must be K/N with 0 <= K < N (e.g. 0/2), got {spec!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def take(self, n_units: int) -> range:
        """This shard's contiguous range of ``n_units`` units (the first ``n_units % count`` shards
        get one more)."""
        size, extra = divmod(n_units, self.count)
        start = self.index * size + min(self.index, extra)
        return range(start, start + size + (self.index < extra))

    def part(self, out: Path) -> Path:
        """Where this shard writes its part of ``out``: ``<out's folder>/shards/<stem>.K-of-N<suffix>``."""
        return part_path(out, self.index, self.count)

    def parts(self, outs: Sequence[str]) -> list[str]:
        """This shard's part of each of ``outs`` (project-relative POSIX paths)."""
        return [self.part(Path(o)).as_posix() for o in outs]


def part_path(out: Path, index: int, count: int) -> Path:
    """Shard ``index`` of ``count``'s part of ``out``: ``<out's folder>/shards/<stem>.K-of-N<suffix>``."""
    return Path(out).parent / "shards" / f"{Path(out).stem}.{index}-of-{count}{Path(out).suffix}"


def all_parts(outs: Sequence[str], count: int) -> list[str]:
    """Every shard's part of each of ``outs``: what the merge of ``count`` shards reads."""
    return [part_path(Path(o), k, count).as_posix() for o in outs for k in range(count)]


def shard_name(name: str, shard: Shard | None) -> str:
    """``name`` (a stage, or its metrics file) for the unsharded or merge run, ``<name>_shard_K`` for
    shard K: the DVC stage, the MLflow run and the metrics file of a shard."""
    return f"{name}_shard_{shard.index}" if shard else name


def merge_parts(out: Path, count: int) -> None:
    """Concatenate the ``count`` parts of ``out`` in shard order into ``out`` (bytes, not re-encoded).
    Raises ``FileNotFoundError`` naming the first missing part."""
    parts = [part_path(out, k, count) for k in range(count)]
    missing = [p for p in parts if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"shard part {missing[0]} is missing: run every shard of the stage before merging")
    tmp = Path(out).with_suffix(Path(out).suffix + ".tmp")
    with open(tmp, "wb") as fh:
        for p in parts:
            fh.write(p.read_bytes())
    tmp.replace(out)


def sharded_rows(out: Path, model: type[R], n_units: int, compute: Callable[[range], Sequence[R]],
                 shard: Shard | None = None, merge: int = 0) -> list[R]:
    """The rows of a shardable stage, written where this run's mode puts them, and returned (for
    the stage's metrics):

    - unsharded (default): ``compute(range(n_units))`` -> ``out``;
    - ``shard``: ``compute(shard.take(n_units))`` -> ``shard.part(out)``;
    - ``merge`` = N: the N parts concatenated -> ``out`` (nothing computed).

    ``compute`` must give each unit's rows independently of the other units in its range."""
    if shard is not None and merge:
        raise ValueError("a stage run is either one shard (--shard) or the merge (--merge), not both")
    if merge:
        merge_parts(out, merge)
        return read_jsonl(out, model)
    units = shard.take(n_units) if shard else range(n_units)
    rows = list(compute(units))
    write_jsonl(shard.part(out) if shard else out, rows)
    return rows
