"""The decoder's forward pass for a quantized model on CPU, with the work between matmuls fused.

A quantized layer's matmuls (``Int4Linear``, ``Int8Linear``) take bfloat16
activations and return bfloat16.  Written as eager PyTorch, the rest of a
layer (two RMSNorms, the casts around every matmul, the q/k/v split,
rotate-half RoPE, the KV cache write, SiLU and the gate product, the residual
adds) is about 130 small ops issued one by one from Python: on SmolLM2-135M
int4 at batch 1, 1 thread, that was about 40% of a decode step, more than the
int4 matmuls themselves.  Here each layer is nine calls: three fused kernels
of Loom's own (``torch.ops.loom.add_rms_norm``, ``rope_kv_write``,
``silu_mul``; ``runtime/kernels/fused_layer_cpu.cpp``), the four matmuls, the
attention and one cast.  The arithmetic per element is the eager path's
(float32 norms, rotary and residual stream, bfloat16 matmul inputs), so the
two agree up to float32 rounding order, and every row is computed on its own,
so a request's output does not depend on its batch.

Quantization installs :data:`FUSED_CPU_PATH` as the model's ``fused_path``
(``loom.runtime.quantization.apply.install_head``); it runs when
:func:`fused_forward_supported` says so: a CPU model whose four
projections per layer are quantized, without Qwen3's q/k norms or biases
other than q/k/v's, with the kernels built.  Float32 models keep the eager
path, op for op transformers' (the reference the equality tests compare with).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from loom.runtime.quantization.int4 import Int4Linear
from loom.runtime.quantization.int8 import ACT_DTYPE, Int8Linear

if TYPE_CHECKING:
    from loom.runtime.attention import AttentionMetadata, PagedAttention
    from loom.runtime.models.llama import LlamaModel


def fused_forward_supported(model: LlamaModel) -> bool:
    """Whether :func:`fused_forward` can run ``model``: on CPU, float32 residual stream, every projection
    quantized, no q/k norms, no bias on ``o_proj``/``gate_up_proj``/``down_proj``, the kernels built."""
    from loom.runtime.kernels import cpu_fused_layer_ops

    if model.norm.weight.device.type != "cpu" or model.norm.weight.dtype != torch.float32:
        return False
    for layer in model.decoder_layers:
        attn, mlp = layer.self_attn, layer.mlp
        linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        if attn.qk_norm or not all(isinstance(m, (Int4Linear, Int8Linear)) for m in linears):
            return False
        if any(getattr(m, "bias", None) is not None for m in linears[1:]):
            return False
    return cpu_fused_layer_ops()


def fused_forward(model: LlamaModel, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
                  ) -> torch.Tensor:
    """The decoder stack and final norm on the fused path.

    Args:
        model: a model :func:`fused_forward_supported` accepts.
        h: ``[T, hidden]`` float32 token embeddings; updated in place (it becomes the residual stream).
        positions: ``[T]`` int64 positions.
        meta: the step's attention metadata.

    Returns:
        ``[T, hidden]`` float32, the final norm's output (the LM head's input).
    """
    ops = torch.ops.loom
    cos = model.rope.cos[positions]  # [T, D] float32
    sin = model.rope.sin[positions]
    delta: torch.Tensor | None = None
    for p in _plan(model):
        x = ops.add_rms_norm(h, delta, p.norm1, p.eps1, True)
        q, k, v = ops.rope_kv_write(p.qkv.matmul(x), p.qkv.bias, cos, sin, p.attn.k_cache, p.attn.v_cache,
                                    meta.slot_mapping, p.num_heads, p.num_kv_heads)
        o = p.o.matmul(p.attn.attend(q, k, v, meta).to(ACT_DTYPE))
        x = ops.add_rms_norm(h, o, p.norm2, p.eps2, True)
        delta = p.down.matmul(ops.silu_mul(p.gate_up.matmul(x)))
    return ops.add_rms_norm(h, delta, model.norm.weight, model.norm.eps, False)


@dataclass(frozen=True)
class _LayerPlan:
    """One decoder layer's modules and tensors, looked up once: ``nn.Module.__getattr__`` is a Python call, and
    reaching them through the module tree took about 20 a layer, ~0.4 ms a token on SmolLM2's 30 layers."""

    norm1: torch.Tensor
    eps1: float
    qkv: Int4Linear | Int8Linear
    attn: PagedAttention
    num_heads: int
    num_kv_heads: int
    o: Int4Linear | Int8Linear
    norm2: torch.Tensor
    eps2: float
    gate_up: Int4Linear | Int8Linear
    down: Int4Linear | Int8Linear


def _plan(model: LlamaModel) -> list[_LayerPlan]:
    """``model``'s layer plans, built on first use and kept on the model (its modules are not replaced after
    quantization installs this path; a layer's weights may change layout, which the plan does not hold)."""
    plan: list[_LayerPlan] | None = model.__dict__.get("_fused_plan")
    if plan is None:
        plan = []
        for layer in model.decoder_layers:
            attn, mlp = layer.self_attn, layer.mlp
            plan.append(_LayerPlan(
                layer.input_layernorm.weight, layer.input_layernorm.eps, _quantized(attn.qkv_proj), attn.attn,
                attn.num_heads, attn.num_kv_heads, _quantized(attn.o_proj), layer.post_attention_layernorm.weight,
                layer.post_attention_layernorm.eps, _quantized(mlp.gate_up_proj), _quantized(mlp.down_proj)))
        model.__dict__["_fused_plan"] = plan
    return plan


def _quantized(linear: nn.Module) -> Int4Linear | Int8Linear:
    """``linear`` with its type (:func:`fused_forward_supported` checked it)."""
    return cast("Int4Linear | Int8Linear", linear)


class FusedCPUPath:
    """:func:`fused_forward` as a ``LlamaModel.fused_path``."""

    def supported(self, model: LlamaModel) -> bool:
        return fused_forward_supported(model)

    def forward(self, model: LlamaModel, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        return fused_forward(model, h, positions, meta)


FUSED_CPU_PATH = FusedCPUPath()
