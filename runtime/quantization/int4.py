"""int4 weight-only linear layer: asymmetric, one scale and zero per group of input channels.

The layout is tinygemm's, which PyTorch's CPU kernel reads:
``_convert_weight_to_int4pack_for_cpu(q [N, K] int32 in [0, 15], inner_k_tiles)``
packs the codes, and ``_weight_int4pack_mm_for_cpu(x [M, K], packed, group_size,
scales_and_zeros [K / group_size, N, 2])`` computes ``x @ W^T`` with
``W[n, k] = (q[n, k] - 8) * scale[g, n] + zero[g, n]``, ``g = k // group_size``.

The kernel is a decode kernel (few rows).  From :data:`GEMM_MIN_ROWS` rows on
(prefill chunks) :class:`Int4Linear` unpacks its codes to a bfloat16 weight and
calls the bfloat16 GEMM, as :class:`~loom.runtime.quantization.int8.Int8Linear`
does.  Unpacking reads the packed layout of PyTorch's AVX-512 CPU kernel: per
block of 64 output rows, per input channel, 32 bytes whose low nibbles are rows
0-31 and high nibbles rows 32-63.  :func:`packed_layout_is_known` checks that
layout once per process on a probe, so a build that packs differently keeps
the kernel path for every row count instead of computing with wrong weights.
"""

from __future__ import annotations

import torch
from torch import nn

from loom.runtime.quantization.int8 import ACT_DTYPE, GEMM_MIN_ROWS

GROUP_SIZES = (32, 64, 128)
# Fractions of a group's [min, max] range tried by the clipping search; 1.0 is plain min-max.
CLIP_RATIOS = (1.0, 0.97, 0.94, 0.91, 0.88, 0.85, 0.82, 0.79)
_ROWS_PER_CHUNK = 4096
_PACK_ROWS = 64  # output rows per packed block (PyTorch's AVX-512 int4 CPU layout)
_layout_known: bool | None = None


def unpack_codes(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The ``[N, K]`` uint8 codes in [0, 15] of ``packed`` (``_convert_weight_to_int4pack_for_cpu``'s ``[N, K / 2]``
    uint8), for ``N`` divisible by 64; a layout other than the AVX-512 one gives wrong codes
    (see :func:`packed_layout_is_known`)."""
    blocks = packed.view(n // _PACK_ROWS, k, _PACK_ROWS // 2)
    codes = torch.cat([blocks & 15, blocks >> 4], dim=2)  # [N / 64, K, 64]
    return codes.transpose(1, 2).reshape(n, k)


def packed_layout_is_known() -> bool:
    """Whether this PyTorch build packs int4 codes as :func:`unpack_codes` reads them (probed once)."""
    global _layout_known
    if _layout_known is None:
        probe = torch.randint(0, 16, (2 * _PACK_ROWS, 64), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
        try:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 1)
            _layout_known = packed.shape == (probe.shape[0], probe.shape[1] // 2) and torch.equal(
                unpack_codes(packed, *probe.shape).to(torch.int32), probe)
        except RuntimeError:
            _layout_known = False
    return _layout_known


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric group-wise 4-bit quantization with a squared-error clipping search.

    For each group, the range ``[lo, hi]`` is the group's ``[min, max]``
    shrunk about its centre by each of :data:`CLIP_RATIOS`; the ratio with the
    least squared error wins.  The scale and zero are rounded to bfloat16
    before the codes are chosen, so the codes fit the grid the kernel uses.

    Args:
        weight: ``[N, K]`` float tensor, ``K`` divisible by ``group_size``.
        group_size: input channels per group (32, 64 or 128).

    Returns:
        ``(q, scales, zeros)``: ``q`` ``[N, K]`` uint8 in [0, 15]; ``scales``
        and ``zeros`` ``[N, K / group_size]`` bfloat16, with
        ``weight ≈ (q - 8) * scale + zero`` per group.

    Raises:
        ValueError: ``group_size`` not one of :data:`GROUP_SIZES`, or ``K`` not
            divisible by it.
    """
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size: must be one of {GROUP_SIZES}, got {group_size}")
    n, k = weight.shape
    if k % group_size:
        raise ValueError(f"group_size: {k} input channels are not divisible by {group_size}")
    q = torch.empty(n, k, dtype=torch.uint8)
    scales = torch.empty(n, k // group_size, dtype=ACT_DTYPE)
    zeros = torch.empty_like(scales)
    for start in range(0, n, _ROWS_PER_CHUNK):
        rows = slice(start, min(n, start + _ROWS_PER_CHUNK))
        q[rows], scales[rows], zeros[rows] = _quantize_rows(weight[rows].detach().float(), group_size)
    return q, scales, zeros


def _quantize_rows(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, k = w.shape
    g = w.view(n, k // group_size, group_size)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)
    mid, half = (hi + lo) / 2, (hi - lo) / 2
    best_err = torch.full_like(lo, float("inf"))
    best_q = torch.zeros_like(g, dtype=torch.uint8)
    best_s, best_z = torch.zeros_like(lo), torch.zeros_like(lo)
    for ratio in CLIP_RATIOS:
        clo, chi = mid - half * ratio, mid + half * ratio
        scale = ((chi - clo) / 15).clamp(min=1e-8).to(ACT_DTYPE).float()
        zero = (clo + 8 * scale).to(ACT_DTYPE).float()
        codes = torch.round((g - zero[..., None]) / scale[..., None] + 8).clamp(0, 15)
        err = ((codes - 8) * scale[..., None] + zero[..., None] - g).pow(2).sum(-1)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_q = torch.where(better[..., None], codes.to(torch.uint8), best_q)
        best_s, best_z = torch.where(better, scale, best_s), torch.where(better, zero, best_z)
    return best_q.view(n, k), best_s.to(ACT_DTYPE), best_z.to(ACT_DTYPE)


class Int4Linear(nn.Module):
    """``y = x W^T + b`` with ``W`` stored as packed 4-bit codes (weight-only quantization).

    Shapes: ``x [T, K]`` in any float dtype -> ``[T, N]`` in ``x``'s dtype;
    ``packed`` is the kernel's opaque uint8 layout of ``[N, K]`` codes;
    ``scales_and_zeros [K / group_size, N, 2]`` bfloat16; ``bias [N]`` float32
    or ``None``.
    """

    packed: torch.Tensor
    scales_and_zeros: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int, in_features: int,
                 bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = scales_and_zeros.shape[1], in_features
        self.group_size = group_size
        self.register_buffer("packed", packed)
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.gemm_min_rows = GEMM_MIN_ROWS if self.out_features % _PACK_ROWS == 0 and packed_layout_is_known() \
            else None  # rows from which forward() unpacks to bfloat16 and calls the GEMM; None: never

    @classmethod
    def from_codes(cls, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int,
                   bias: torch.Tensor | None) -> Int4Linear:
        """Pack codes ``q [N, K]`` in [0, 15] with ``scales``/``zeros [N, K / group_size]`` (:func:`quantize_int4`)."""
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 1)
        scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).to(ACT_DTYPE).contiguous()
        return cls(packed, scales_and_zeros, group_size, q.shape[1], bias)

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> Int4Linear:
        """Quantize a float ``weight [N, K]`` (:func:`quantize_int4`), keep ``bias [N]`` in float32."""
        q, scales, zeros = quantize_int4(weight, group_size)
        return cls.from_codes(q, scales, zeros, group_size, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.matmul(x.to(ACT_DTYPE)).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, K]`` bfloat16 -> ``x W^T`` ``[T, N]`` bfloat16, without the bias: PyTorch's int4 kernel, or
        from ``gemm_min_rows`` rows on the bfloat16 GEMM of the unpacked weight."""
        if self.gemm_min_rows is not None and x.shape[0] >= self.gemm_min_rows:
            return torch.nn.functional.linear(x, self.dequantize(ACT_DTYPE))
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group_size, self.scales_and_zeros)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight ``[N, K]`` this layer multiplies by, in ``dtype``: ``(q - 8) * scale + zero`` per group,
        computed in ``dtype``: in float32 it is exactly the grid the kernel computes on; the prefill GEMM asks for
        bfloat16 (one more rounding, 1.4x faster to unpack: SmolLM2's 1,000-token prefill 1.43 s against 1.56 s).

        Raises:
            RuntimeError: the packed layout is not the one :func:`unpack_codes` reads.
        """
        if self.out_features % _PACK_ROWS or not packed_layout_is_known():
            raise RuntimeError("int4: this PyTorch build's packed layout cannot be unpacked")
        n, k, g = self.out_features, self.in_features, self.group_size
        codes = unpack_codes(self.packed, n, k).view(n, k // g, g).to(dtype) - 8
        sz = self.scales_and_zeros.transpose(0, 1).to(dtype)  # [N, K / g, 2]
        weight = torch.addcmul(sz[..., 1:], codes, sz[..., :1])  # zero + (q - 8) * scale
        return weight.reshape(n, k)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bits=4, " \
               f"group_size={self.group_size}"
