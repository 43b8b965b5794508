"""GGUF files as checkpoints: a cached Hugging Face folder of config and tokenizer that names its GGUF.

A GGUF file (llama.cpp's format) carries the weights, usually quantized
(Q4_0, Q4_1, Q4_K_M, ...), plus the config, the tokenizer and the chat
template as metadata.  :func:`convert_gguf` writes the metadata as an ordinary
HF folder (``config.json``, ``generation_config.json``, ``tokenizer.json`` with
the GGUF's chat template) and ``loom_source.json``, which names the GGUF; it
writes no weights.  The weights stay in the GGUF:

- a quantized load (``--quantization int8|int4``) dequantizes one tensor (or
  block of rows) at a time and quantizes it at once
  (:mod:`loom.runtime.checkpoint.tensors`, :mod:`loom.runtime.quantization.stream`),
  so no float copy exists on disk or in memory;
- a float load dequantizes the same way into the model's parameters;
- :func:`ensure_float_weights` writes float32 safetensors into the folder for
  what needs an ordinary HF folder (transformers as the reference model,
  llama.cpp's ``convert_hf_to_gguf.py`` in the benchmarks); float loads then
  read those, which is faster and gives the same values.

transformers loading the folder (or the GGUF itself) is the reference the
engine is compared with. The tokenizer rebuilt from GGUF metadata may split
some text (digits) differently from the upstream ``tokenizer.json``; the
converted folder is self-consistent, which is what equality needs.

Converted folders live under ``$LOOM_CACHE/gguf/<stem>-<key>`` where the key
hashes the file's absolute path, size and mtime, so a second start takes
seconds and a replaced file is converted again. Creation is atomic
(``loom.runtime.checkpoint.cache.build_atomically``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loom.runtime.checkpoint.cache import build_atomically, loom_cache_root
from loom.runtime.errors import ModelLoadError

logger = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"
SOURCE_FILE = "loom_source.json"


class GGUFConversionError(ModelLoadError):
    """The GGUF file could not be read or converted (message names the file and cause)."""


def find_gguf(path: Path) -> Path | None:
    """The GGUF file ``path`` names: the file itself, or the only ``*.gguf`` in a folder
    that is not already a HF checkpoint (no ``config.json``). ``None`` otherwise.

    Raises:
        GGUFConversionError: a folder holding several ``.gguf`` files (ambiguous).
    """
    if path.is_file() and path.suffix.lower() == GGUF_SUFFIX:
        return path
    if path.is_dir() and not (path / "config.json").is_file():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == GGUF_SUFFIX)
        if len(files) == 1:
            return files[0]
        if len(files) > 1:
            raise GGUFConversionError(
                f"{path} holds {len(files)} .gguf files ({', '.join(f.name for f in files[:3])}...); "
                "pass the file itself")
    return None


def sha256_file(path: Path, chunk_bytes: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


def converted_dir(gguf: Path, cache_root: Path | None = None) -> Path:
    """Where the converted folder of ``gguf`` is cached (it may not exist yet)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    root = cache_root if cache_root is not None else loom_cache_root() / "gguf"
    return root / f"{gguf.stem}-{key}"


_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def gguf_reads_once() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader(path)`` parses each file once and ``gguf.get_tensor_name_map`` is
    memoized.  transformers' GGUF loading parses the file three times (config, tokenizer, weights; about 4 s
    each for SmolLM2's 49k-token vocabulary) and builds the name map once per submodule (397 times, 4 s);
    both are pure functions of their arguments, and transformers imports them from ``gguf`` at call time.
    One conversion at a time patches the module (a lock); the originals are back when the block ends."""
    import gguf as gguf_module

    gguf: Any = gguf_module  # its two attributes are swapped for the block
    with _PATCH_LOCK:
        reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, str], object] = {}

        def reader(path: object, mode: str = "r") -> object:
            key = (str(path), mode)
            if key not in readers:
                readers[key] = reader_cls(path, mode)
            return readers[key]

        gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader_cls, name_map


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Write the HF folder of ``gguf`` into ``out``: its config, generation config and tokenizer, no weights.

    Writes ``config.json``, ``generation_config.json``, the tokenizer files with
    the GGUF's chat template, and ``loom_source.json`` (the GGUF's path relative
    to ``out``, its name and size).

    Raises:
        GGUFConversionError: the ``gguf`` package is missing, or transformers
            cannot read the file (unsupported architecture).
    """
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    _require_gguf_package()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with gguf_reads_once():
            config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        architecture = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a bad file
        raise _unreadable(gguf, exc) from exc
    config.architectures = [architecture]
    config.dtype = "float32"
    config.name_or_path = gguf.stem
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    _drop_load_time_keys(out / "tokenizer_config.json")
    source = {"path": os.path.relpath(gguf.resolve(), out.resolve()), "gguf": gguf.name, "bytes": gguf.stat().st_size}
    (out / SOURCE_FILE).write_text(json.dumps(source) + "\n")
    logger.info("converted %s to %s", gguf, out)
    return out


#: Keys transformers writes into ``tokenizer_config.json`` that say how this process loaded the tokenizer
#: (``local_files_only`` follows ``HF_HUB_OFFLINE``), not what the tokenizer is: left out, a conversion writes
#: the same bytes whatever the environment.
LOAD_TIME_KEYS = ("is_local", "local_files_only")


def _drop_load_time_keys(path: Path) -> None:
    if path.is_file():
        cfg = json.loads(path.read_text(encoding="utf-8"))
        if any(k in cfg for k in LOAD_TIME_KEYS):
            for k in LOAD_TIME_KEYS:
                cfg.pop(k, None)
            path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def gguf_source(folder: Path) -> Path | None:
    """The GGUF file the converted ``folder`` reads its weights from, or None (an ordinary HF folder, or one
    converted before folders named their GGUF, which holds float32 safetensors)."""
    try:
        relative = json.loads((folder / SOURCE_FILE).read_text()).get("path")
    except (OSError, ValueError):
        return None
    return (folder / relative).resolve() if isinstance(relative, str) else None


def ensure_float_weights(folder: Path) -> Path:
    """``folder``, with float32 ``model.safetensors`` written from its GGUF first if it has none.

    For what needs an ordinary HF folder: transformers' ``from_pretrained`` (the
    reference model) and llama.cpp's converter.  The file appears whole or not
    at all (written beside it, then renamed).

    Raises:
        GGUFConversionError: the GGUF is missing or transformers cannot read it.
    """
    gguf = gguf_source(folder)
    if gguf is None or any(folder.glob("*.safetensors")):
        return folder
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    if not gguf.is_file():
        raise GGUFConversionError(f"{folder.name}: its GGUF {gguf} is gone (pull or convert it again)")
    _require_gguf_package()
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with gguf_reads_once():
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a bad file
        raise _unreadable(gguf, exc) from exc
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    # save_pretrained refuses a quantizer-loaded model; the weights are plain floats now.
    # set by from_pretrained, undeclared: the checker sees nn.Module.__getattr__'s Tensor | Module
    model.hf_quantizer = None  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(prefix=".float-", dir=folder) as tmp:
        model.save_pretrained(tmp)
        for file in sorted(Path(tmp).glob("*.safetensors*")):  # shards and their index, if any
            os.replace(file, folder / file.name)
    logger.info("wrote float32 weights of %s into %s", gguf, folder)
    return folder


def _unreadable(gguf: Path, exc: Exception) -> GGUFConversionError:
    """One line naming the file and transformers' first line about it."""
    return GGUFConversionError(f"{gguf.name}: transformers could not read it ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''})")


def _require_gguf_package() -> None:
    try:
        import gguf as _gguf  # noqa: F401 - transformers needs it, say so plainly
    except ImportError as exc:
        raise GGUFConversionError("reading GGUF needs the 'gguf' package: pip install gguf") from exc


def ensure_converted(gguf: Path, cache_root: Path | None = None) -> Path:
    """The cached HF folder of ``gguf``, converting it the first time.

    Raises:
        GGUFConversionError: as :func:`convert_gguf`; nothing is left in the cache.
    """
    final = converted_dir(gguf, cache_root)
    return build_atomically(final, lambda tmp: convert_gguf(gguf, tmp))
