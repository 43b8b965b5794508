"""int8 weight-only linear layer and embedding: symmetric, one scale per output channel.

Decode rows (fewer than :data:`GEMM_MIN_ROWS`) go through Loom's own kernel where it is built
(:func:`loom.runtime.kernels.cpu_int8_linear`: activations rounded to int8 blocks of 32, llama.cpp's
Q8_0, and integer products where the CPU has AVX-512 VNNI or AVX2, else float32 activations and sums), one dot
product per row and output whatever the batch, so a row's result does not depend on the rows decoded
beside it.  Decode at 2 threads with it on every int8 layer: SmolLM2-135M int8 98.0 tok/s at batch 1
and 365.6 at batch 8, Qwen2.5-Coder-0.5B int8 46.0 and 149.1 (the kernel's docstring has the A/B).
Without a build, PyTorch's ``torch.ops.aten._weight_int8pack_mm(x [M, K], q [N, K] int8, scales [N]) ->
[M, N]`` computes ``x @ (q * scales[:, None]).T`` on bfloat16 activations (where it is fastest on CPU;
~2e-2 relative error against float32 sums, against the kernel's ~5e-3 with int8 blocks and ~2e-6
without).  From :data:`GEMM_MIN_ROWS` rows on (prefill chunks) the layer dequantizes its weight to
:func:`prefill_dtype` and calls that GEMM: bfloat16 where the CPU multiplies it natively (on a 2-core
AVX-512 BF16 CPU 2.5x faster than PyTorch's kernel and 1.8x faster than float32 at 512 rows, SmolLM2's
shapes; 1.4x / 1.2x at 64, and slower than the kernel at 16), else float32: on an AVX2 CPU oneDNN
emulates bfloat16, and the bfloat16 GEMM made Qwen2.5-Coder-0.5B int8's 500-token prefill 5.4x slower
than float32's (19.3 s against 3.6 s on a 2-core Zen 3).

On a CUDA device every row count takes Loom's Triton kernel instead (:mod:`loom.runtime.kernels.cuda_int8_linear`:
bfloat16 products on the tensor cores, the weight read once), prefill chunks included.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch
from torch import nn

ACT_DTYPE = torch.bfloat16
GEMM_MIN_ROWS = 64

@functools.cache
def prefill_dtype() -> torch.dtype:
    """The dtype of a quantized layer's prefill GEMM (its dequantized weight and activations): bfloat16 where the
    CPU multiplies it natively (:func:`loom.runtime.kernels.cpu_native_bf16`), else float32 (see the module
    docstring).  The layer's output stays in its input's dtype either way."""
    from loom.runtime.kernels import cpu_native_bf16

    return torch.bfloat16 if cpu_native_bf16() else torch.float32


SCRATCH_MAX_ELEMENTS = 1 << 25
"""Largest weight (elements; 128 MiB in float32) a prefill GEMM dequantizes into the thread's reused scratch
buffer; a larger one (an LM head scoring ``prompt_logprobs``) gets a buffer of its own, freed after the call."""


class _Scratch(threading.local):
    buffer: torch.Tensor | None = None


_scratch = _Scratch()


def dequantize_rows(qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``qweight [N, K]`` int8 times ``scales [N]`` in ``dtype``, written into this thread's scratch buffer (valid
    until the next call on the thread; see :data:`SCRATCH_MAX_ELEMENTS`).  A copy and an in-place scale into
    memory already mapped: on a Zen 3, 1.7 ms for ``[9728, 896]`` against 27.8 ms for ``q.float() * s`` into
    fresh tensors (page faults on every prefill chunk's every layer, 1.5 s of a 0.5B model's 512-token chunk)."""
    n = qweight.numel()
    if n > SCRATCH_MAX_ELEMENTS:
        out = torch.empty(qweight.shape, dtype=dtype)
    else:
        buffer = _scratch.buffer
        if buffer is None or buffer.numel() < n or buffer.dtype != dtype:
            # a normal tensor even when first needed under inference_mode (the engine's), so a later call
            # outside it may still write it in place
            with torch.inference_mode(False):
                buffer = torch.empty(max(n, buffer.numel() if buffer is not None else 0), dtype=dtype)
            _scratch.buffer = buffer
        out = buffer[:n].view(qweight.shape)
    return out.copy_(qweight).mul_(scales.to(dtype)[:, None])


def gemm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x [T, K] @ weight [N, K]^T`` in :func:`prefill_dtype` (both cast), returned in ``x``'s dtype."""
    dtype = prefill_dtype()
    return torch.nn.functional.linear(x.to(dtype), weight.to(dtype)).to(x.dtype)


@functools.cache
def _decode_kernel() -> Callable[..., torch.Tensor] | None:
    from loom.runtime.kernels import cpu_int8_linear

    return cpu_int8_linear()


@functools.cache
def _cuda_decode_kernel() -> Callable[..., torch.Tensor] | None:
    from loom.runtime.kernels.cuda_int8_linear import cuda_int8_linear

    return cuda_int8_linear()


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantization.

    Args:
        weight: ``[N, K]`` float tensor (any float dtype).

    Returns:
        ``(q, scales)``: ``q`` ``[N, K]`` int8 in [-127, 127], ``scales`` ``[N]``
        float32, with ``weight ≈ q * scales[:, None]``.
    """
    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


class Int8Linear(nn.Module):
    """``y = x (q * scales)^T + b`` with int8 ``q`` (weight-only quantization).

    Shapes: ``x [T, K]`` in any float dtype -> ``[T, N]`` in ``x``'s dtype;
    ``qweight [N, K]`` int8, ``scales [N]`` bfloat16 (the kernel's activation
    dtype), ``bias [N]`` float32 or ``None``.

    ``q8_0_activations`` (default ``False``; the LM head's is ``True``, set by
    :func:`loom.runtime.quantization.apply.install_head`): the CPU decode kernel rounds this layer's
    activations to Q8_0's 8-bit codes on every CPU, not to the 7-bit ones it takes on AVX2 alone
    (:func:`loom.runtime.kernels.int8_linear_activation_max_code`): the head's products are the logits.
    """

    qweight: torch.Tensor
    scales: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = qweight.shape[1], qweight.shape[0]
        self.register_buffer("qweight", qweight.contiguous())
        self.register_buffer("scales", scales.to(ACT_DTYPE).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.q8_0_activations = False

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> Int8Linear:
        """Quantize a float ``weight [N, K]`` (and keep ``bias [N]`` in float32)."""
        q, scales = quantize_int8(weight)
        return cls(q, scales, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        decode = self._decode(x.shape[0])
        if decode is None:
            y = self.matmul(x.to(ACT_DTYPE)).to(x.dtype)
        else:  # the CPU kernel takes float32 rows, the CUDA one float32 or bfloat16
            y = decode(x.contiguous() if x.is_cuda else x.float().contiguous(), self.qweight, self.scales).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def _decode(self, rows: int) -> Callable[..., torch.Tensor] | None:
        """Loom's kernel for this layer's device when it takes these rows: on CPU fewer than :data:`GEMM_MIN_ROWS`
        and a build (the same choice for every decode batch size, so a row's result never depends on its batch);
        on CUDA every row count, where Triton imports."""
        if self.qweight.is_cuda:
            return _cuda_decode_kernel()  # every row count: faster than dequantizing for cuBLAS (its docstring)
        kernel = _decode_kernel() if rows < GEMM_MIN_ROWS else None
        return functools.partial(kernel, q8_0=True) if kernel is not None and self.q8_0_activations else kernel

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, K]`` bfloat16 -> ``x (q * scales)^T`` ``[T, N]`` bfloat16, without the bias: Loom's decode
        kernel (see the module docstring; PyTorch's int8 kernel without a build), or from
        :data:`GEMM_MIN_ROWS` rows on the GEMM of the weight dequantized to :func:`prefill_dtype`."""
        decode = self._decode(x.shape[0])
        if decode is not None:
            return decode(x.contiguous(), self.qweight, self.scales)  # bfloat16 in and out
        if x.shape[0] >= GEMM_MIN_ROWS:
            return gemm(x, dequantize_rows(self.qweight, self.scales, prefill_dtype()))  # exact codes
        return torch.ops.aten._weight_int8pack_mm(x, self.qweight, self.scales)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight ``[N, K]`` this layer multiplies by."""
        return self.qweight.float() * self.scales.float()[:, None]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bits=8"


class QuantizedEmbedding(nn.Module):
    """Embedding lookup from int8 rows: ``out[t] = q[ids[t]] * scales[ids[t]]``.

    Shapes: ``ids [T]`` int64 -> ``[T, K]`` in ``dtype``; ``qweight [V, K]``
    int8, ``scales [V]`` float32.  Used for tied embeddings, whose rows are the
    head's output channels, so one int8 copy serves both.
    """

    qweight: torch.Tensor
    row_scales: torch.Tensor

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("qweight", qweight)
        self.register_buffer("row_scales", scales.float().contiguous())
        self.dtype = dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.qweight.index_select(0, ids).to(torch.float32) * self.row_scales.index_select(0, ids)[:, None]
        return rows.to(self.dtype)
