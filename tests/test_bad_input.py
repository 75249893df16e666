"""Bad input files through the command line (issue 24, rows 5-7 and 9): a seeds file that is empty,
missing, malformed or oversized, and a truncated model folder, end in one short message naming the
file, line, field and fix, exit code 2, no traceback (unless --verbose), and earlier outputs left as
they were. A fuzz test over seeds files and params values checks the same of anything."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from selfevolve.cli import app
from selfevolve.inputs import MAX_QUESTION_CHARS

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
OUTPUTS = ("pool.jsonl", "val.jsonl", "heldout.jsonl")


def _row(i: int, text: str | None = None) -> dict:
    return {"question": text or f"What is {i} + {i}?", "answer": str(2 * i)}


def _project(root: Path, seeds: str | None, **params) -> Path:
    """A project with a seeds file (``seeds`` as its text; None: no file), params naming it and
    earlier outputs of the seeds stage holding known bytes."""
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seeds"].update({"set": "seeds.jsonl", "size": 20, "heldout_size": 2, "val_size": 2})
    for dotted, value in params.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    (root / "params.yaml").write_text(yaml.safe_dump(data))
    if seeds is not None:
        (root / "seeds.jsonl").write_text(seeds, encoding="utf-8")
    base = root / "data" / "cycles" / "base"
    base.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        (base / name).write_bytes(f"earlier {name}\n".encode())
    return base


def _seeds(root: Path, *extra: str):
    return runner.invoke(app, ["seeds", "--root", str(root), "--params", str(root / "params.yaml"), "--no-track", *extra])


def _outputs(base: Path) -> dict[str, bytes]:
    return {n: (base / n).read_bytes() for n in OUTPUTS}


def _refused(result, base: Path, *fragments: str) -> str:
    err = result.stderr
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and len(err.strip().splitlines()) <= 3, err
    for f in fragments:
        assert f in err, (f, err)
    assert _outputs(base) == {n: f"earlier {n}\n".encode() for n in OUTPUTS}
    return err


def _jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_a_good_seeds_file_is_split(tmp_path):
    base = _project(tmp_path, _jsonl(_row(i) for i in range(10)))
    r = _seeds(tmp_path)
    assert r.exit_code == 0, r.output
    assert [len((base / n).read_text().splitlines()) for n in OUTPUTS] == [6, 2, 2]


def test_an_empty_seeds_file_is_refused_naming_it_and_seeds_set(tmp_path):
    """Row 5: exit 0 with 0 questions, and pool, val and held-out overwritten."""
    base = _project(tmp_path, "")
    _refused(_seeds(tmp_path), base, "seeds.jsonl", "seeds.set", "0 questions")


def test_too_few_questions_for_an_empty_pool_are_refused(tmp_path):
    base = _project(tmp_path, _jsonl(_row(i) for i in range(4)))
    _refused(_seeds(tmp_path), base, "seeds.set", "seeds.heldout_size", "seeds.val_size")


def test_a_missing_seeds_file_is_one_line(tmp_path):
    """Row 6: a 71-line traceback."""
    base = _project(tmp_path, None)
    _refused(_seeds(tmp_path), base, "seeds.jsonl", "no such file", "seeds.set")


@pytest.mark.parametrize("bad, field, fragment", [
    ('{"question": "What is 1 + 1?", "answer": 2', None, "not valid JSON"),
    ('{"answer": "2"}', "question", "no question field"),
    ('{"question": "What is 1 + 1?", "answer": ""}', "answer", "expected an answer string"),
    ('{"question": 5, "answer": "2"}', "question", ""),
    ('["What is 1 + 1?", "2"]', None, "expected a JSON object"),
])
def test_a_malformed_line_names_file_line_and_field(tmp_path, bad, field, fragment):
    """Row 6: a seeds file with a malformed line 18 gave a 105-line traceback."""
    lines = [json.dumps(_row(i)) for i in range(30)]
    lines[17] = bad
    base = _project(tmp_path, "\n".join(lines) + "\n")
    _refused(_seeds(tmp_path), base, "seeds.jsonl:18", fragment, *([f"field '{field}'"] if field else []))


def test_verbose_shows_the_traceback(tmp_path):
    lines = [json.dumps(_row(i)) for i in range(30)]
    lines[17] = "{"
    _project(tmp_path, "\n".join(lines) + "\n")
    r = _seeds(tmp_path, "--verbose")
    assert r.exit_code == 2 and "Traceback" in r.stderr and "seeds.jsonl:18" in r.stderr


def test_an_oversized_question_has_its_own_message(tmp_path):
    """Row 7: one 50 MB line was accepted into a 52 MB pool."""
    rows = [_row(i) for i in range(10)]
    rows[3] = _row(3, "x" * (MAX_QUESTION_CHARS + 1))
    base = _project(tmp_path, _jsonl(rows))
    _refused(_seeds(tmp_path), base, "seeds.jsonl:4", "field 'text'", f"limit of {MAX_QUESTION_CHARS:,}")


def test_an_oversized_row_is_refused_before_it_is_read_whole(tmp_path):
    rows = [json.dumps(_row(i)) for i in range(10)]
    rows[5] = json.dumps({"question": "What is 1 + 1?", "answer": "2", "notes": "y" * 3_000_000})
    base = _project(tmp_path, "\n".join(rows) + "\n")
    _refused(_seeds(tmp_path), base, "seeds.jsonl:6", "limit per row")


def test_a_truncated_model_folder_is_named_with_the_fix(tmp_path, tiny_model_dir):
    """Row 9: a truncated models/base/model.safetensors, then `selfevolve challenge --cycle c1`:
    a 122-line traceback without a path."""
    import shutil

    base = _project(tmp_path, None)
    (base / "pool.jsonl").write_text(_jsonl([{"id": "q1", "domain": "math", "text": "What is 1 + 1?",
                                              "spec": {"kind": "math", "answer": "2"}}]))
    model = tmp_path / "models" / "base"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    r = runner.invoke(app, ["challenge", "--cycle", "c1", "--root", str(tmp_path), "--params", str(tmp_path / "params.yaml"),
                            "--no-track"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert str(weights) in r.stderr and "dvc checkout" in r.stderr and len(r.stderr.strip().splitlines()) <= 3
    assert not (tmp_path / "data" / "cycles" / "c1" / "challenge.jsonl").exists()


# -- fuzz ----------------------------------------------------------------------------------------

_good_line = st.builds(lambda i: json.dumps(_row(i)), st.integers(0, 999))
_json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                           max_leaves=6)
_odd_row = st.dictionaries(st.sampled_from(["question", "answer", "id", "spec", "problem", "solution", "text", "domain"]),
                           _json_value, max_size=4).map(json.dumps)
_line = st.one_of(_good_line, _good_line, _odd_row, st.text(max_size=40).map(lambda s: s.replace("\n", " ")),
                  st.just(""), st.just(json.dumps(_row(1, "x" * (MAX_QUESTION_CHARS + 1)))))
_seeds_text = st.lists(_line, max_size=14).map(lambda ls: "\n".join(ls) + "\n") | st.binary(max_size=60).map(
    lambda b: b.decode("latin-1"))
_params = st.dictionaries(
    st.sampled_from(["seeds.size", "seeds.heldout_size", "seeds.val_size", "seed", "sage.solver_samples", "rl.steps",
                     "sage.alpha", "mass.enabled", "seeds.set", "model.base", "sage.frontier_band"]),
    _json_value | st.sampled_from(["pypi:x==1", "pypi:-rreq.txt", "seeds.jsonl", "a.json", "arith"]), max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seeds=_seeds_text, params=_params)
def test_fuzz_seeds_files_and_params_exit_2_or_succeed_and_never_lose_outputs(seeds, params):
    if params.get("seeds.set") == "arith":  # the generated set is not an input file (and slow at the default sizes)
        params["seeds.set"] = "seeds.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            base = _project(root, seeds, **params)
        except (KeyError, TypeError):  # a dotted key under a value that is not a section: not a params file we can write
            return
        r = _seeds(root)
        assert r.exit_code in (0, 2), (r.exit_code, r.output, r.exception)
        assert "Traceback" not in r.output
        if r.exit_code == 2:
            assert _outputs(base) == {n: f"earlier {n}\n".encode() for n in OUTPUTS}, r.stderr
