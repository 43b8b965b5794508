"""A checkpoint's tensors, read one tensor (or one block of rows) at a time, under Hugging Face names.

Two sources give the same stream of :class:`TensorRows`:

- ``*.safetensors`` files (a HF folder), read through ``safe_open(...).get_slice``;
- a GGUF file (llama.cpp's format, usually quantized: Q4_0, Q4_1, Q4_K_M, Q8_0,
  ...), dequantized to float32 tensor by tensor with ``gguf``'s own
  ``dequantize``, renamed and row-permuted as transformers' GGUF loader does
  (``transformers.modeling_gguf_pytorch_utils``: its name map and its tensor
  processors, so a tensor read here equals the one ``from_pretrained(...,
  gguf_file=...)`` builds, bit for bit).

A tensor with more than :data:`ROW_BLOCK_ELEMENTS` elements comes in blocks
of rows (the vocabulary-sized embedding and head, 0.9 GB each in float32 for
Qwen2.5-1.5B), so a reader that quantizes as it goes never holds a whole float
copy of the model, nor of its largest tensor.  GGUF bytes are read with
``os.pread`` into fresh buffers rather than through the reader's memory map, so
the file's pages do not count in the process's resident set.

A converted GGUF folder (:mod:`loom.runtime.checkpoint.gguf`) holds the
config and tokenizer and names its GGUF; float32 safetensors appear in it only
when something asks for them (``ensure_float_weights``).  When both exist the
safetensors are read (faster; the same values).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ROW_BLOCK_ELEMENTS = 1 << 22  # 16 MiB of float32: larger tensors come in blocks of rows
_WHOLE_TENSORS = (".attn_q.", ".attn_k.")  # transformers' llama processor permutes their rows across the tensor


@dataclass(frozen=True)
class TensorRows:
    """Rows ``[start, start + data.shape[0])`` of the checkpoint tensor ``name`` (HF naming).

    ``data`` is ``[rows, ...]`` in the file's float dtype (safetensors) or
    float32 (GGUF); ``total`` is the whole tensor's first dimension.  A 1-D
    tensor comes whole (``start == 0``, ``data.shape[0] == total``).
    """

    name: str
    start: int
    total: int
    data: torch.Tensor

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.data.shape[0] == self.total

    def rows_of(self, target: torch.Tensor) -> torch.Tensor:
        """The rows of ``target`` (the whole tensor this block belongs to) that the block fills.

        Raises:
            ValueError: ``target``'s shape is not the checkpoint tensor's (names the tensor).
        """
        if target.shape[0] != self.total or target.shape[1:] != self.data.shape[1:]:
            raise ValueError(f"model: tensor {self.name!r} has {self.total} rows of {tuple(self.data.shape[1:])}, "
                             f"expected {tuple(target.shape)}")
        return target[self.start:self.start + self.data.shape[0]]


def checkpoint_tensors(path: Path, hf_config: PretrainedConfig) -> Iterator[TensorRows]:
    """Every tensor of the checkpoint folder ``path``: its safetensors, else the GGUF it was converted from.

    Raises:
        FileNotFoundError: neither ``*.safetensors`` nor a GGUF source in ``path``.
        GGUFConversionError: the GGUF cannot be read (missing ``gguf`` package, unknown architecture).
    """
    files = sorted(path.glob("*.safetensors"))
    if files:
        yield from _safetensors_rows(files)
        return
    from loom.runtime.checkpoint.gguf import gguf_source

    gguf = gguf_source(path)
    if gguf is None:
        raise FileNotFoundError(f"model: no *.safetensors in {path}")
    yield from gguf_rows(gguf, hf_config)


def weights_stamp(path: Path) -> str:
    """What identifies the weights of the folder ``path`` for caches of things derived from them: the GGUF it
    was converted from (path, size, mtime) when it has one, else its safetensors files' names, sizes, mtimes."""
    from loom.runtime.checkpoint.gguf import gguf_source

    gguf = gguf_source(path)
    files = [gguf] if gguf is not None else sorted(path.glob("*.safetensors"))
    return "|".join(f"{f.resolve() if f is gguf else f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                    for f in files)


def _row_blocks(shape: tuple[int, ...] | list[int]) -> Iterator[tuple[int, int]]:
    rows = shape[0] if shape else 1
    per_row = max(1, int(torch.Size(shape[1:]).numel()))
    step = rows if len(shape) < 2 else max(1, ROW_BLOCK_ELEMENTS // per_row)
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def _safetensors_rows(files: list[Path]) -> Iterator[TensorRows]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if "rotary_emb" in name:
                    continue
                part = f.get_slice(name)
                shape = part.get_shape()
                if len(shape) < 2:
                    yield TensorRows(name, 0, shape[0] if shape else 1, f.get_tensor(name))
                    continue
                for start, end in _row_blocks(shape):
                    yield TensorRows(name, start, shape[0], part[start:end])


@dataclass(frozen=True)
class _GGUFTensor:
    """What reading one GGUF tensor needs, kept after the file's reader (and its parsed metadata) is dropped."""

    name: str
    hf_name: str
    qtype: Any  # gguf.GGMLQuantizationType
    offset: int  # bytes from the file's start
    rows: int  # the first dimension (a vector's length)
    row_bytes: int  # bytes per row (a vector's bytes)
    row_shape: tuple[int, ...]  # the raw data's shape after the first dimension ([bytes per row] when quantized)
    dtype: Any  # numpy dtype of the raw data
    columns: int  # elements per row once dequantized (1 for a vector)

    @property
    def vector(self) -> bool:
        return not self.row_shape


def gguf_rows(gguf: Path, hf_config: PretrainedConfig) -> Iterator[TensorRows]:
    """The tensors of the GGUF file ``gguf`` dequantized to float32, under the HF names of ``hf_config``'s model.

    Tensors transformers' loader would skip (no HF parameter maps to them) are skipped too.  The file's
    parsed metadata (for a 150k-token vocabulary, half a GB of Python objects) is dropped before the first
    tensor is read.

    Raises:
        GGUFConversionError: the ``gguf`` package is missing or the file's architecture is unknown to it.
    """
    import numpy as np

    tensors, processor, names, dequantize = _gguf_plan(gguf, hf_config)
    fd = os.open(gguf, os.O_RDONLY)
    try:
        for t in tensors:
            whole = t.vector or any(s in t.name for s in _WHOLE_TENSORS)
            for start, end in [(0, t.rows)] if whole else _row_blocks((t.rows, t.columns)):
                size = t.row_bytes if t.vector else (end - start) * t.row_bytes
                data = np.frombuffer(os.pread(fd, size, t.offset + start * t.row_bytes), dtype=t.dtype)
                data = data.reshape((end - start, *t.row_shape))
                weights = processor.process(weights=dequantize(data, t.qtype), name=t.name,
                                            tensor_key_mapping=names, parsed_parameters={}).weights
                yield TensorRows(t.hf_name, start, t.rows, torch.from_numpy(np.array(weights, np.float32)))
    finally:
        os.close(fd)


def _gguf_plan(gguf: Path, hf_config: PretrainedConfig) -> tuple[list[_GGUFTensor], Any, dict[str, str], Any]:
    """The file's tensors that map to HF names, transformers' tensor processor for its architecture, the
    GGUF-to-HF name map and ``gguf.dequantize``."""
    from loom.runtime.checkpoint.gguf import GGUFConversionError, gguf_reads_once

    try:
        from gguf import GGUFReader, dequantize
    except ImportError as exc:
        raise GGUFConversionError("reading GGUF needs the 'gguf' package: pip install gguf") from exc
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        read_field,
    )

    reader = GGUFReader(gguf)
    architecture = read_field(reader, "general.architecture")[0]
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=hf_config.to_dict())
    with torch.device("meta"):  # only the parameter names are needed
        hf_model = AutoModelForCausalLM.from_config(hf_config)
    try:
        with gguf_reads_once():  # the name map is built once per submodule otherwise
            names = get_gguf_hf_weights_map(hf_model, processor)
    except NotImplementedError as exc:
        raise GGUFConversionError(f"{gguf.name}: {exc}") from exc
    tensors = []
    for t in reader.tensors:
        if t.name not in names:
            continue
        shape = tuple(int(d) for d in t.data.shape)  # [rows, bytes per row] quantized, [rows, K] float, [K] vector
        rows = shape[0] if len(shape) > 1 else 1
        tensors.append(_GGUFTensor(t.name, names[t.name], t.tensor_type, int(t.data_offset), shape[0],
                                   int(t.n_bytes) // rows, shape[1:], t.data.dtype, int(t.n_elements) // rows))
    del reader  # its parsed fields are most of the memory the plan took
    return tensors, processor, names, dequantize
