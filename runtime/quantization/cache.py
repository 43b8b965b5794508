"""Quantized weights cached on disk, so a later start neither re-quantizes nor holds a float copy.

The first load of a checkpoint with a given method quantizes it while reading
it (:func:`~loom.runtime.quantization.stream.quantize_checkpoint`: no float
copy of the model, from safetensors or straight from a GGUF) and writes its whole
state (codes, scales, norms, biases) to
``$LOOM_CACHE/quantized/<folder>-<method>-<key>/weights.safetensors``,
atomically (``loom.runtime.checkpoint.cache.build_atomically``).  The key hashes
the checkpoint folder's path, its weights' identity
(:func:`~loom.runtime.checkpoint.tensors.weights_stamp`: the GGUF it names, or
its safetensors files' sizes and modification times), the method, the
group size, the dtype, the torch version and, for int4, the packed layout's block rows (the int4 packing
is PyTorch's own layout, and its AVX-512 and AVX2 builds pack differently:
:func:`~loom.runtime.quantization.int4.packed_block_rows`) and :data:`FORMAT_VERSION` (what the quantizers put on
their grids).  Later loads build the model on the meta
device (no float weights are allocated), swap in quantized modules of the
right shapes and assign the cached tensors, so peak memory is about the
quantized weights.

int4 layers are stored in the layout they compute in: Loom's int4 kernel's tiles
(:meth:`~loom.runtime.quantization.int4.Int4Linear.use_tiles`) where that kernel is built,
so a load only reads them; converting PyTorch's packed layout to tiles at every start took
0.9 s for SmolLM2 and 6.4 s for Qwen2.5-Coder-1.5B (one thread).  A process without the
kernel packs a stored tile layout back (:meth:`~loom.runtime.quantization.int4.Int4Linear.load_tiles`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from loom.runtime.checkpoint.cache import build_atomically, loom_cache_root
from loom.runtime.checkpoint.tensors import weights_stamp
from loom.runtime.quantization.apply import check_method, use_cpu_kernel_layouts
from loom.runtime.quantization.int4 import Int4Linear, packed_block_rows
from loom.runtime.quantization.stream import quantize_checkpoint, quantized_skeleton

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from loom.runtime.models.llama import LlamaForCausalLM

WEIGHTS = "weights.safetensors"
FORMAT_VERSION = 3
"""Raised when the quantizers' output or the stored layout changes, so older caches are rebuilt (2: int4 scales and
zeros on the 8-bit block grid; 3: int4 layers in the tile layout where the kernel is built)."""
_TILED = ("tiles", "tile_scales_zeros", "tile_exponents")  # an Int4Linear's buffers in the tile layout
_TIED = "lm_head.qweight"
_EMBED = "model.embed_tokens.qweight"


def cache_dir(path: Path, method: str, group_size: int, dtype: torch.dtype, root: Path | None = None) -> Path:
    """Where the quantized state of the checkpoint at ``path`` is cached (it may not exist yet)."""
    layout = f"|packed{packed_block_rows()}" if method == "int4" else ""  # a cache read on another CPU kind
    key = hashlib.sha256(
        f"{path.resolve()}|{weights_stamp(path)}|{method}|{group_size}|{dtype}|{torch.__version__}|"
        f"{FORMAT_VERSION}{layout}".encode())
    return (root or loom_cache_root() / "quantized") / f"{path.name}-{method}-{key.hexdigest()[:12]}"


def load_quantized(path: Path, hf_config: PretrainedConfig, *, method: str, group_size: int, dtype: torch.dtype,
                   max_positions: int | None, root: Path | None = None) -> LlamaForCausalLM:
    """The model at ``path`` quantized with ``method``: from the cache, or quantized while read and cached.

    Args:
        path: the checkpoint folder (safetensors, or a converted GGUF folder naming its GGUF).
        hf_config: its config.
        method / group_size: as ``quantize_model``.
        dtype: the engine's activation dtype (norms and biases are kept in it).
        max_positions: rotary table length.
        root: cache folder (default ``$LOOM_CACHE/quantized``).

    Raises:
        ValueError: an unknown ``method`` (before any cache folder is made), or as ``quantize_checkpoint``;
            OSError: the cache cannot be written.
        FileNotFoundError / GGUFConversionError: as ``quantize_checkpoint``.
    """
    check_method(method)
    folder = cache_dir(path, method, group_size, dtype, root)
    if (folder / WEIGHTS).is_file():
        return _from_cache(folder / WEIGHTS, hf_config, method, group_size, dtype, max_positions)
    model = quantize_checkpoint(path, hf_config, method=method, group_size=group_size, dtype=dtype,
                                max_positions=max_positions)
    use_cpu_kernel_layouts(model)  # stored as computed: a later load reads the tiles instead of making them
    build_atomically(folder, lambda tmp: _save(model, tmp / WEIGHTS), marker=WEIGHTS)
    return model


def _save(model: LlamaForCausalLM, file: Path) -> None:
    from safetensors.torch import save_file

    state = {name: t.contiguous() for name, t in model.state_dict().items()}
    tied = _TIED in state and state[_TIED].data_ptr() == state[_EMBED].data_ptr()
    if tied:
        del state[_TIED]
    save_file(state, str(file), metadata={"tied_head": str(tied)})


def _from_cache(file: Path, hf_config: PretrainedConfig, method: str, group_size: int, dtype: torch.dtype,
                max_positions: int | None) -> LlamaForCausalLM:
    model = quantized_skeleton(hf_config, method, group_size, dtype, max_positions)
    state, metadata = _read_safetensors(file)
    tied = metadata.get("tied_head") == "True"
    if tied:
        state[_TIED] = state[_EMBED]
    for name, module in model.named_modules():
        if isinstance(module, Int4Linear) and f"{name}.tiles" in state:
            module.load_tiles(*(state.pop(f"{name}.{part}") for part in _TILED))
            for part in ("packed", "scales_and_zeros", *_TILED):  # the layout it took (tiles, or packed back)
                if getattr(module, part) is not None:
                    state[f"{name}.{part}"] = getattr(module, part)
    model.load_state_dict(state, strict=True, assign=True)
    return model


_DTYPES = {"I8": torch.int8, "U8": torch.uint8, "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
           "I32": torch.int32, "I64": torch.int64}


def _read_safetensors(file: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor of a safetensors file read straight into its own fresh tensor, and the metadata.

    Not ``safetensors.safe_open``: its tensors are views of the mapped file at the file's own
    offsets, and PyTorch's int8 kernel crashes on a weight that is not 64-byte aligned; copying
    them would hold each tensor twice for a moment. Reading the bytes into an allocated tensor
    (the format is an 8-byte header length, a JSON header of dtypes, shapes and byte offsets,
    then the data) holds each once.

    Raises:
        ValueError: a dtype this cache never writes, or a truncated file.
    """
    import json

    state: dict[str, torch.Tensor] = {}
    with open(file, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        metadata = header.pop("__metadata__", {}) or {}
        for name, info in header.items():
            if info["dtype"] not in _DTYPES:
                raise ValueError(f"{file}: tensor {name!r} has dtype {info['dtype']}, not one this cache writes")
            tensor = torch.empty(info["shape"], dtype=_DTYPES[info["dtype"]])
            start, end = info["data_offsets"]
            f.seek(8 + size + start)
            buffer = tensor.reshape(-1).view(torch.uint8).numpy().data  # the tensor's own bytes, writable
            if f.readinto(buffer) != end - start:
                raise ValueError(f"{file}: truncated at tensor {name!r}")
            state[name] = tensor
    return state, metadata
