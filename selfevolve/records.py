"""Typed records exchanged between stages, and their JSONL storage.

Every stage reads and writes JSON Lines files of these records; each line is one
record's ``model_dump(mode="json")``, so ``datasets.load_dataset("json", data_files=...)``
reads any of them.

Records
-------
``Question``      a problem with its verifier spec (seed item, Challenger output or benchmark item)
``CriticScore``   the Critic's 1-10 judgement of a question or a plan, normalised to [0, 1]
``Plan``          the Planner's multi-step plan for a question
``Attempt``       one Solver completion for a question (n per question)
``Verdict``       the verifier's decision on an attempt
``Trajectory``    a multi-agent workflow run (MASS): every agent message, the final answer
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterable, Iterator, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from selfevolve.inputs import MAX_QUESTION_CHARS, InputError

Domain = Literal["math", "code"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MathSpec(_Record):
    """Verifier spec of a math question: the reference final answer (LaTeX or plain text)."""

    kind: Literal["math"] = "math"
    answer: str


class IOCase(_Record):
    """One stdin/stdout case for a program that reads stdin."""

    stdin: str = ""
    stdout: str


class CodeSpec(_Record):
    """Verifier spec of a code question.

    ``tests`` are Python statements (usually ``assert f(x) == y``) run after the candidate
    program; ``io_cases`` are stdin/stdout pairs for whole programs. ``setup`` runs before the
    tests (imports, helpers). ``reference_solution`` is the Challenger's or dataset's solution,
    which spec validation runs against the tests.
    """

    kind: Literal["code"] = "code"
    entry_point: str | None = None
    tests: list[str] = Field(default_factory=list)
    io_cases: list[IOCase] = Field(default_factory=list)
    setup: str = ""
    reference_solution: str | None = None


VerifierSpec = Annotated[Union[MathSpec, CodeSpec], Field(discriminator="kind")]


class PassRate(_Record):
    """The Solver's measured pass rate on a question: the mean correctness of its ``samples``
    attempts in cycle ``cycle`` (written by the rewards stage; read by the pool's frontier
    weighting and the report)."""

    pass_rate: float = Field(ge=0.0, le=1.0)
    samples: int = Field(ge=1)
    cycle: str


# fields that older records kept in ``Question.meta``; read from there when the field is absent
_LIFTED_META = ("form", "split", "reference", "answer_agrees")


class Question(_Record):
    """A problem with a verifier spec.

    ``source`` says where it came from (``seed:arith``, ``challenger``, ``benchmark:gsm8k`` ...);
    ``level`` is a difficulty level where the generator knows one (1 = easiest);
    ``parent_id`` is the reference item a Challenger question was written from. ``text`` holds at
    most ``MAX_QUESTION_CHARS`` characters (20,000; ``selfevolve.inputs``).

    Fields stages decide on (typed here, never read out of ``meta``):

    * ``form``: the arithmetic form (``"3+2"``: a 3-digit plus a 2-digit number) where known;
    * ``split``: which part of a held-out or validation set the question belongs to (arith:
      ``seed`` = retention, ``frontier``, ``beyond``; MBPP rows: their dataset split);
    * ``reference``: who computed the reference answer of a Challenger question
      (``environment``: computed from the expression; ``challenger``: the Challenger's own answer,
      a pseudo-label) and ``answer_agrees``: whether the Challenger's answer matched the
      environment's;
    * ``measured``: the Solver's latest pass rate on it (``PassRate``).

    ``meta`` holds everything else (worked solutions, benchmark fields, ``categories``: the names
    of the fields or ``meta`` keys results are broken down by). Records written before these
    fields existed (the keys inside ``meta``, ``meta.pass_rate`` / ``samples`` / ``measured_in``)
    are read into them.
    """

    id: str
    domain: Domain
    text: str
    spec: VerifierSpec
    level: int | None = None
    source: str = "seed"
    parent_id: str | None = None
    cycle: int | None = None
    form: str | None = None
    split: str | None = None
    reference: Literal["environment", "challenger"] | None = None
    answer_agrees: bool | None = None
    measured: PassRate | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _lift_meta(cls, data: Any) -> Any:
        """Older records: move the typed fields' keys out of ``meta``."""
        if not isinstance(data, dict) or not isinstance(data.get("meta"), dict):
            return data
        meta = data["meta"]
        if not any(k in meta for k in (*_LIFTED_META, "pass_rate")):
            return data
        data, meta = dict(data), dict(meta)
        for key in _LIFTED_META:
            if key in meta:
                value = meta.pop(key)
                data.setdefault(key, value)
        if "pass_rate" in meta:
            rate, samples, cycle = meta.pop("pass_rate"), meta.pop("samples", 1), meta.pop("measured_in", "")
            data.setdefault("measured", {"pass_rate": rate, "samples": samples, "cycle": str(cycle)})
        data["meta"] = meta
        return data

    @field_validator("text")
    @classmethod
    def _size(cls, text: str) -> str:
        if len(text) > MAX_QUESTION_CHARS:
            raise ValueError(f"question text of {len(text):,} characters is over the limit of {MAX_QUESTION_CHARS:,} "
                             "(selfevolve.inputs.MAX_QUESTION_CHARS): shorten the question or leave the row out")
        return text

    @property
    def answer(self) -> str | None:
        return self.spec.answer if isinstance(self.spec, MathSpec) else None

    def categories(self) -> dict[str, str]:
        """What results are broken down by: ``level`` (when known) and each field (``form``,
        ``split``) or ``meta`` key named in ``meta["categories"]`` with a non-empty value (MATH-500 ``subject``, OlympiadBench
        ``subfield``, ...), as strings."""
        cats: dict[str, str] = {} if self.level is None else {"level": str(self.level)}
        for key in self.meta.get("categories") or []:
            val = getattr(self, key) if key in ("form", "split") else self.meta.get(key)
            if val is not None and str(val).strip():
                cats[str(key)] = str(val)
        return cats


class CriticScore(_Record):
    """The Critic's judgement. ``raw`` is the parsed 1-10 (or 0-1) number or None if unparseable;
    ``score`` is the normalised value in [0, 1] (docs/design.md: s in (1,10] -> (s-1)/9, unparseable -> 0.5).
    ``target`` is ``question`` or ``plan``; ``target_id`` the question id or plan id."""

    target: Literal["question", "plan"]
    target_id: str
    question_id: str
    completion: str
    raw: float | None
    score: float
    format_reward: float
    passed: bool
    prompt: str = ""


class Plan(_Record):
    """A Planner completion for a question; ``steps`` empty when unparseable."""

    id: str
    question_id: str
    completion: str
    steps: list[str] = Field(default_factory=list)
    text: str | None = None
    format_reward: float = 0.0
    prompt: str = ""


class Attempt(_Record):
    """One Solver sample. ``plan_id`` is set when the plan passed the plan gate and was shown."""

    id: str
    question_id: str
    sample: int
    completion: str
    answer: str | None = None
    code: str | None = None
    plan_id: str | None = None
    format_reward: float = 0.0
    prompt: str = ""
    output_tokens: int = 0
    forced: bool = False  # the answer was forced (``sampling.force_answer_tokens``): the text was continued after "<answer>"


#: Verdict statuses that say nothing about the answer: the verifier itself failed (a sandbox
#: supervisor died on the job and on its retry). Such a verdict is counted apart and never becomes
#: a wrong answer or a reward.
INFRA_STATUSES = frozenset({"infra_error"})


class Verdict(_Record):
    """Verifier outcome for an attempt: ``correct`` is s_gt in {0,1}; ``status`` is the math
    grader's or sandbox's status string; ``detail`` a short human-readable reason; ``extracted`` the
    final answer the math grader read (None for code). A verdict with a status in
    ``INFRA_STATUSES`` is not ``graded``: its ``correct`` (0) means nothing and no reward uses it."""

    attempt_id: str
    question_id: str
    correct: float
    status: str
    detail: str = ""
    extracted: str | None = None

    @property
    def graded(self) -> bool:
        """Whether the verifier decided (not an infrastructure error)."""
        return self.status not in INFRA_STATUSES


class AgentMessage(_Record):
    """One message inside a workflow run: which agent, chat role, text, token counts."""

    agent_id: str
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    prompt_tokens: int = 0
    output_tokens: int = 0


class Trajectory(_Record):
    """A whole multi-agent workflow run on one question (MASS)."""

    id: str
    design_id: str
    question_id: str
    messages: list[AgentMessage]
    final_answer: str | None
    completed: bool
    correct: float | None = None
    output_tokens: int = 0


class ChallengerRollout(_Record):
    """One Challenger completion: the reference item it was written from, the parsed question
    (None when unparseable), r_f, and whether the verifier spec validated (with the reason)."""

    id: str
    parent_id: str
    domain: Domain
    prompt: str
    completion: str
    question: Question | None = None
    format_reward: float = 0.0
    spec_valid: bool = False
    spec_reason: str = ""


class Rollout(_Record):
    """A (prompt, completion, reward) triple of one role, the unit of RL training.

    ``group`` ties samples of the same prompt together (the Solver's n samples); ``advantage``
    is filled by the datasets stage (Task-Relative REINFORCE++ normalisation per role)."""

    id: str
    role: Literal["challenger", "planner", "solver", "critic"]
    group: str
    question_id: str
    prompt: str
    completion: str
    reward: float
    advantage: float | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


#: ``Rollout.detail["source"]`` of the rows that distil a MASS champion into the single pass
#: (``selfevolve.mass.distill``: the team's verified runs as the Solver's replies, and one pass's own
#: on the forms beside them), which the ``train_sft`` stage trains on.
DISTILL_SOURCE = "mass_distill"

R = TypeVar("R", bound=BaseModel)


class RecordFileError(InputError):
    """A JSONL file has a malformed line. Carries ``path``, ``line`` (1-based) and ``field``."""

    def __init__(self, path: str | os.PathLike, line: int, field: str | None, message: str):
        self.path, self.line, self.field = str(path), line, field
        where = f"{path}:{line}" + (f" field '{field}'" if field else "")
        super().__init__(f"{where}: {message}")


def read_jsonl(path: str | os.PathLike, model: type[R]) -> list[R]:
    """Read every line of ``path`` as a ``model`` record.

    Raises ``RecordFileError`` naming the 1-based line and the first bad field (with what is
    expected) on malformed JSON or a record that fails validation; ``FileNotFoundError`` if
    the file is missing. Blank lines are skipped.
    """
    return list(iter_jsonl(path, model))


def iter_json_lines(path: str | os.PathLike, error: type[RecordFileError] = RecordFileError,
                    opener=open, max_chars: int | None = None) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) for every non-blank line of a JSON Lines file.

    Raises ``error(path, line, None, message)`` for a line that is not UTF-8, not valid JSON, not
    a JSON object or (with ``max_chars``) longer than ``max_chars`` characters, which is refused
    without reading the rest of it; ``FileNotFoundError`` if the file is missing. ``opener`` may
    be ``gzip.open`` for ``.jsonl.gz``.
    """
    with opener(path, "rt", encoding="utf-8") as fh:
        lineno = 0
        while True:
            try:
                line = fh.readline(-1 if max_chars is None else max_chars + 1)
            except UnicodeDecodeError as exc:
                raise error(path, lineno + 1, None, f"not UTF-8 text ({exc.reason})") from None
            if not line:
                return
            lineno += 1
            if max_chars is not None and len(line.rstrip("\r\n")) > max_chars:
                raise error(path, lineno, None, f"a row of more than {max_chars:,} characters (the limit per row): "
                            "shorten it or leave it out")
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(path, lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise error(path, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def validate_record(model: type[R], obj: dict, path: str | os.PathLike, line: int,
                    error: type[RecordFileError] = RecordFileError) -> R:
    """``model.model_validate(obj)``, raising ``error`` that names the file, line, first bad field,
    the value found and the record type expected."""
    with record_errors(path, line, model.__name__, error):
        return model.model_validate(obj)


@contextmanager
def record_errors(path: str | os.PathLike, line: int, what: str, error: type[RecordFileError] = RecordFileError):
    """Turn a pydantic ``ValidationError`` raised inside the block (building a record from row
    ``line`` of ``path``) into ``error`` naming the file, line, first bad field, the value found and
    ``what`` was expected."""
    try:
        yield
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        raise error(path, line, field,
                    f"{err['msg']} (got {str(err.get('input'))[:80]!r}); expected a {what} record") from None


def iter_jsonl(path: str | os.PathLike, model: type[R]) -> Iterator[R]:
    """Like ``read_jsonl``, lazily."""
    for lineno, obj in iter_json_lines(path):
        yield validate_record(model, obj, path, lineno)


def write_jsonl(path: str | os.PathLike, records: Iterable[BaseModel | dict]) -> int:
    """Write records atomically (temp file + rename): a crash mid-write leaves the old file intact.

    Returns the number of records written. Parent directories are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for rec in records:
                obj = rec.model_dump(mode="json") if isinstance(rec, BaseModel) else rec
                fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return n


#: Wall-clock keys of a training summary: kept in the stage's metrics, never in a model folder.
WALL_CLOCK_KEYS = frozenset({"seconds", "runtime_s"})


def write_model_summary(path: str | os.PathLike, summary: dict) -> None:
    """Write a training summary into a model folder (``bootstrap.json``, ``rl.json``) without its
    wall-clock times: a model folder then holds only what the stage's inputs determine, so its DVC
    hash is the same whichever machine trained it (the times stay in the stage's metrics file)."""
    write_json(path, {k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS})


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write one JSON document atomically (used for metrics files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
