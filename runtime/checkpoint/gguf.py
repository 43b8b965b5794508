"""GGUF files as checkpoints: dequantized once into a cached Hugging Face folder.

A GGUF file (llama.cpp's format) carries the weights, often quantized
(Q4_0, Q4_1, Q4_K_M, ...), plus the config, the tokenizer and the chat
template as metadata. Loom does not run quantized kernels: it lets
transformers read the file (``from_pretrained(..., gguf_file=...)``, which
needs the ``gguf`` package and dequantizes every tensor to float) and saves
the result as an ordinary HF folder (float32 safetensors, ``tokenizer.json``,
chat template, generation config). The engine then loads that folder like any
other, and transformers loading the *same folder* is the reference the engine
is compared with. The tokenizer rebuilt from GGUF metadata may split some text
(digits) differently from the upstream ``tokenizer.json``; the converted
folder is self-consistent, which is what equality needs.

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
def _gguf_reads_once() -> Iterator[None]:
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
    """Dequantize ``gguf`` into a float32 HF checkpoint folder ``out``.

    Writes ``config.json``, ``model.safetensors``, ``generation_config.json``,
    the tokenizer files with the GGUF's chat template, and ``loom_source.json``
    (the source file's name and size).

    Raises:
        GGUFConversionError: the ``gguf`` package is missing, or transformers
            cannot read the file (unsupported architecture or tensor type).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    try:
        import gguf as _gguf  # noqa: F401 - transformers needs it, say so plainly
    except ImportError as exc:
        raise GGUFConversionError("reading GGUF needs the 'gguf' package: pip install gguf") from exc
    out.mkdir(parents=True, exist_ok=True)
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with _gguf_reads_once():
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a bad file
        raise GGUFConversionError(f"{gguf.name}: transformers could not read it ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    # save_pretrained refuses a quantizer-loaded model; the weights are plain floats now.
    # set by from_pretrained, undeclared: the checker sees nn.Module.__getattr__'s Tensor | Module
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = gguf.stem
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / SOURCE_FILE).write_text(json.dumps({"gguf": gguf.name, "bytes": gguf.stat().st_size}) + "\n")
    logger.info("converted %s to %s", gguf, out)
    return out


def ensure_converted(gguf: Path, cache_root: Path | None = None) -> Path:
    """The cached HF folder of ``gguf``, converting it the first time.

    Raises:
        GGUFConversionError: as :func:`convert_gguf`; nothing is left in the cache.
    """
    final = converted_dir(gguf, cache_root)
    return build_atomically(final, lambda tmp: convert_gguf(gguf, tmp))
