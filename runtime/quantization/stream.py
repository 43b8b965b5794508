"""Quantize a checkpoint while reading it, never holding the float model.

:func:`quantize_checkpoint` reads the checkpoint's tensors one at a time (or a
block of rows at a time, :func:`loom.runtime.checkpoint.tensors.checkpoint_tensors`:
safetensors, or a GGUF dequantized block by block) and turns them into the
quantized state :func:`~loom.runtime.quantization.apply.quantize_model` would
give the loaded float model, tensor for tensor:

- each projection's float weight (``qkv_proj`` and ``gate_up_proj`` gathered
  from their q/k/v and gate/up shards) is assembled in the engine's dtype,
  quantized as soon as its last rows (and bias) arrive, and released; the
  checkpoint's order (layer by layer) keeps about one layer's floats alive;
- the embedding and an untied head are quantized to int8 row block by row
  block into their final tensors (per-row scales make a block's result its
  own);
- norms and biases are kept in the engine's dtype.

The model itself is built on the meta device with quantized modules of the
right shapes (:func:`quantized_skeleton`) and takes the tensors by assignment,
so peak memory is the quantized weights plus one layer's floats plus one row
block (64 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from loom.runtime.host_memory import release_free_memory
from loom.runtime.quantization.apply import install_head, projections
from loom.runtime.quantization.int4 import Int4Linear
from loom.runtime.quantization.int8 import ACT_DTYPE, Int8Linear, QuantizedEmbedding, quantize_int8

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from loom.runtime.checkpoint.tensors import TensorRows
    from loom.runtime.models.llama import LlamaForCausalLM

EMBED = "model.embed_tokens"
HEAD = "lm_head"


def quantized_skeleton(hf_config: PretrainedConfig, method: str, group_size: int, dtype: torch.dtype,
                       max_positions: int | None) -> LlamaForCausalLM:
    """The model of ``hf_config`` on the meta device, its projections, head and embedding already the quantized
    modules ``method`` gives, their tensors meta placeholders of the quantized shapes (no memory)."""
    from loom.runtime.models.llama import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(hf_config, max_positions).to(dtype)
    meta = torch.device("meta")

    def linear(layer: nn.Module, bits: str) -> nn.Module:
        assert isinstance(layer, nn.Linear)
        n, k = layer.weight.shape
        bias = None if layer.bias is None else torch.empty(n, device=meta)
        if bits == "int8":
            return Int8Linear(torch.empty(n, k, dtype=torch.int8, device=meta), torch.empty(n, device=meta), bias)
        return Int4Linear(torch.empty(n, k // 2, dtype=torch.uint8, device=meta),
                          torch.empty(k // group_size, n, 2, dtype=ACT_DTYPE, device=meta), group_size, k, bias)

    for parent, name in projections(model):
        setattr(parent, name, linear(getattr(parent, name), method))
    vocab, hidden = model.model.embed_tokens.weight.shape
    install_head(model, QuantizedEmbedding(torch.empty(vocab, hidden, dtype=torch.int8, device=meta),
                                           torch.empty(vocab, device=meta), dtype),
                 linear(model.lm_head, "int8"))
    return model


@dataclass
class _Projection:
    """A projection's float weight (and bias) being assembled from the checkpoint's shards."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    rows_left: dict[str, int] = field(default_factory=dict)

    def add(self, leaf: str, shard: slice | None, block: TensorRows) -> bool:
        """Copy ``block`` in; whether the weight and bias are now whole."""
        target = self.weight if leaf == "weight" else self.bias
        if target is None:
            raise ValueError(f"model: unexpected tensor {block.name!r} in checkpoint")
        block.rows_of(target if shard is None else target[shard]).copy_(block.data)
        self.rows_left[leaf] -= block.data.shape[0]
        return not any(self.rows_left.values())


@dataclass
class _Rows:
    """The int8 rows and per-row scales of the embedding or an untied head, filled block by block."""

    qweight: torch.Tensor
    scales: torch.Tensor
    rows_left: int

    def add(self, block: TensorRows, dtype: torch.dtype) -> None:
        q, scales = quantize_int8(block.data.to(dtype))
        block.rows_of(self.qweight).copy_(q)
        self.scales[block.start:block.start + q.shape[0]] = scales
        self.rows_left -= block.data.shape[0]


def quantize_checkpoint(path: Path, hf_config: PretrainedConfig, *, method: str, group_size: int,
                        dtype: torch.dtype, max_positions: int | None) -> LlamaForCausalLM:
    """The model at ``path`` quantized with ``method`` while its tensors are read (see the module docstring).

    Returns the model on CPU, its tensors in PyTorch's layouts (what the quantized cache stores).

    Raises:
        FileNotFoundError: no weights in ``path``.
        ValueError: a tensor the model does not expect, of the wrong shape, or missing; a bad ``group_size``.
        GGUFConversionError: the folder's GGUF cannot be read.
    """
    from loom.runtime.checkpoint.tensors import checkpoint_tensors

    model = quantized_skeleton(hf_config, method, group_size, dtype, max_positions)
    floats = dict(model.named_parameters())  # norms (and nothing else: the quantized tensors are buffers)
    owners = {id(module): path for path, module in model.named_modules()}
    quantized = {f"{owners[id(parent)]}.{name}": getattr(parent, name) for parent, name in projections(model)}
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    vocab, hidden = hf_config.vocab_size, hf_config.hidden_size
    rows = {EMBED: _Rows(torch.empty(vocab, hidden, dtype=torch.int8), torch.empty(vocab), vocab)}
    if not tied:
        rows[HEAD] = _Rows(torch.empty(vocab, hidden, dtype=torch.int8), torch.empty(vocab), vocab)
    pending: dict[str, _Projection] = {}
    state: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for block in checkpoint_tensors(path, hf_config):
            name, shard = model.hf_target(block.name)
            prefix, _, leaf = name.rpartition(".")
            if prefix in quantized:
                building = pending.get(prefix) or pending.setdefault(prefix, _projection(quantized[prefix], dtype))
                if building.add(leaf, shard, block):
                    del pending[prefix]
                    state.update(_quantize(prefix, building, method, group_size))
                    del building
                    release_free_memory()
            elif prefix in rows and leaf == "weight":
                rows[prefix].add(block, dtype)
                release_free_memory()
            elif tied and prefix == HEAD:
                continue  # the head is the embedding (transformers ties after loading, ignoring this tensor)
            elif name in floats and floats[name].shape == block.data.shape and block.whole:
                state[name] = block.data.to(dtype)
            else:
                raise ValueError(f"model: unexpected tensor {block.name!r} of shape {tuple(block.data.shape)}")
    unfinished = sorted(pending) + sorted(p for p, r in rows.items() if r.rows_left)
    missing = unfinished + sorted(set(floats) - set(state))
    if missing:
        raise ValueError(f"model: checkpoint lacks tensors {missing[:5]}")
    embed = rows[EMBED]
    state.update(_prefixed(EMBED, QuantizedEmbedding(embed.qweight, embed.scales, dtype)))
    head = embed if tied else rows[HEAD]
    state.update(_prefixed(HEAD, Int8Linear(head.qweight, head.scales, None)))
    model.load_state_dict(state, strict=True, assign=True)
    return model


def _projection(layer: nn.Module, dtype: torch.dtype) -> _Projection:
    assert isinstance(layer, Int8Linear | Int4Linear)
    n, k = layer.out_features, layer.in_features
    bias = None if layer.bias is None else torch.empty(n, dtype=dtype)
    left = {"weight": n} | ({} if bias is None else {"bias": n})
    return _Projection(torch.empty(n, k, dtype=dtype), bias, left)


def _quantize(prefix: str, building: _Projection, method: str, group_size: int) -> dict[str, torch.Tensor]:
    layer = Int8Linear.from_float(building.weight, building.bias) if method == "int8" \
        else Int4Linear.from_float(building.weight, building.bias, group_size)
    return _prefixed(prefix, layer)


def _prefixed(prefix: str, module: nn.Module) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{key}": value for key, value in module.state_dict().items()}
