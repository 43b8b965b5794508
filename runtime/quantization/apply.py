"""Swap a loaded model's float layers for quantized ones, in place.

Quantized: every decoder layer's ``qkv_proj``, ``o_proj``, ``gate_up_proj``,
``down_proj`` in the chosen format; the LM head in int8 under both methods,
as llama.cpp's 4-bit files keep their output tensor at 6 or 8 bits: on
SmolLM2-135M a group-32 int4 head alone raised perplexity by about 6%, an
int8 one by under 0.5%.  The token embedding becomes int8 rows
(:class:`~loom.runtime.quantization.int8.QuantizedEmbedding`), the same
tensor as the head's when the checkpoint ties them.  Norms, biases and
rotary tables stay float.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from loom.runtime.quantization.int4 import Int4Linear
from loom.runtime.quantization.int8 import Int8Linear, QuantizedEmbedding, quantize_int8

if TYPE_CHECKING:
    from loom.runtime.models.llama import LlamaForCausalLM

QUANTIZATION_METHODS = ("int8", "int4")
PROJECTIONS = (("self_attn", "qkv_proj"), ("self_attn", "o_proj"), ("mlp", "gate_up_proj"), ("mlp", "down_proj"))


def check_method(method: str) -> None:
    """Raises ValueError unless ``method`` is one of :data:`QUANTIZATION_METHODS`."""
    if method not in QUANTIZATION_METHODS:
        raise ValueError(f"quantization: must be one of {QUANTIZATION_METHODS}, got {method!r}")


def quantize_model(model: LlamaForCausalLM, method: str, group_size: int = 32) -> LlamaForCausalLM:
    """Quantize ``model``'s linear layers, head and embedding in place (weight-only).

    The head is int8 under both methods (see the module docstring).

    Args:
        model: a loaded float model on CPU.
        method: ``"int8"`` (per-channel) or ``"int4"`` (``group_size`` groups).
        group_size: int4 group size (32, 64 or 128); ignored for int8.

    Returns:
        ``model``, its float weights released.

    Raises:
        ValueError: an unknown ``method`` or ``group_size``, a layer whose input
            size is not divisible by ``group_size``, or a model not on CPU (the grid
            is computed and packed on CPU; :func:`use_cuda_layouts`
            then moves it to a GPU).
    """
    check_method(method)
    if model.lm_head.weight.device.type != "cpu":
        raise ValueError("quantization: quantize the model on CPU, then move it (use_cuda_layouts)")
    with torch.no_grad():
        for parent, name in projections(model):
            setattr(parent, name, _quantize_linear(getattr(parent, name), method, group_size))
        embed = model.model.embed_tokens
        tied = model.lm_head.weight is embed.weight
        rows, scales = quantize_int8(embed.weight)
        head = Int8Linear(rows, scales, None) if tied else _quantize_linear(model.lm_head, "int8", group_size)
        install_head(model, QuantizedEmbedding(rows, scales, embed.weight.dtype), head)
    return model


def use_cpu_kernel_layouts(model: nn.Module) -> int:
    """Move every int4 layer of a loaded ``model`` to Loom's int4 kernel and its tile layout where it is built
    (:meth:`Int4Linear.use_tiles`); returns how many moved (again on a second call).  The quantized cache calls
    it before writing, so it stores the tile layout; the loader calls it after reading, for a cache written where
    the kernel was not built (and for :func:`~loom.runtime.quantization.quantize_model`'s models)."""
    return sum(m.use_tiles() for m in model.modules() if isinstance(m, Int4Linear))


def use_cuda_layouts(model: nn.Module, device: torch.device) -> nn.Module:
    """Move a quantized ``model`` (CPU layouts, as :func:`~loom.runtime.quantization.quantize_model` or the cache
    leaves it) to ``device``, every int4 layer into tinygemm's layout; returns ``model``.

    Raises:
        ValueError: ``device`` is not CUDA, or an int4 layer's shape or group tinygemm cannot take.
        RuntimeError: this PyTorch build's tinygemm reads neither nibble order
            (:func:`loom.runtime.quantization.cuda.tinygemm_nibble_order`).
    """
    if device.type != "cuda":
        raise ValueError(f"use_cuda_layouts: {device} is not a CUDA device")
    for module in model.modules():
        if isinstance(module, Int4Linear):
            module.use_tinygemm(device)
    return model.to(device)


def projections(model: LlamaForCausalLM) -> Iterator[tuple[nn.Module, str]]:
    """``(parent, attribute)`` of every projection quantization replaces (:data:`PROJECTIONS` of each layer)."""
    for layer in model.model.decoder_layers:
        for parent_name, child_name in PROJECTIONS:
            yield getattr(layer, parent_name), child_name


def install_head(model: LlamaForCausalLM, embedding: nn.Module, head: nn.Module) -> None:
    """Put the quantized ``embedding`` and ``head`` in place of the float ones, and the fused CPU forward
    (:mod:`loom.runtime.models.fused_forward`, taken when it supports the model) as its ``fused_path``; an int8
    head keeps Q8_0 activation codes (``Int8Linear.q8_0_activations``)."""
    if isinstance(head, Int8Linear):
        head.q8_0_activations = True  # 8-bit activation codes for the logits (Int8Linear's docstring)
    # setattr: the float model declares these as nn.Embedding / nn.Linear
    setattr(model.model, "embed_tokens", embedding)  # noqa: B010
    setattr(model, "lm_head", head)  # noqa: B010
    from loom.runtime.models.fused_forward import FUSED_CPU_PATH  # it imports this package's layers

    model.model.fused_path = FUSED_CPU_PATH


def _quantize_linear(linear: nn.Module, method: str, group_size: int) -> nn.Module:
    if not isinstance(linear, nn.Linear):
        raise ValueError(f"quantization: cannot quantize a {type(linear).__name__} (tensor-parallel layers "
                         "are not quantized)")
    if method == "int8":
        return Int8Linear.from_float(linear.weight, linear.bias)
    return Int4Linear.from_float(linear.weight, linear.bias, group_size)


def quantized_bytes(model: nn.Module) -> int:
    """Bytes of all parameters and buffers of ``model``, a tensor shared between modules counted once (the
    tensors' own bytes: several may share one storage, the huge-page arena of :mod:`loom.runtime.host_memory`)."""
    from loom.runtime.host_memory import tensor_key

    seen: set[tuple[int, torch.dtype, tuple[int, ...]]] = set()
    total = 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = tensor_key(t)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total
