"""Quantized layers on a CUDA device: the same grid, in the layouts of the CUDA kernels.

A model is quantized (or read from the quantized cache) on CPU exactly as for a CPU engine, so the
codes, scales and zero points, and therefore the quality figures measured on CPU, are the same; then
:func:`~loom.runtime.quantization.apply.use_cuda_layouts` moves it to the GPU, each layer in the
layout its CUDA kernel reads.
Activations are bfloat16 inside the products (float32 or bfloat16 outside, the engine's dtype).

- int4 (:class:`~loom.runtime.quantization.int4.Int4Linear`): PyTorch's CUDA tinygemm kernel
  (``torch.ops.aten._weight_int4pack_mm``, the one torchao's ``int4_weight_only`` and gpt-fast call;
  sm80 or newer), its weight packed by ``_convert_weight_to_int4pack`` from ``[N, K / 2]`` uint8 bytes
  of two codes each, with the same ``scales_and_zeros [K / G, N, 2]`` bfloat16 as the CPU kernel
  (tinygemm's grid, ``w = (q - 8) * scale + zero``).  Which nibble of a byte holds the even input
  channel is probed once per process (:func:`tinygemm_nibble_order`) against the dequantized weight,
  so a PyTorch build that reads them the other way never computes with a wrong weight.  tinygemm takes
  every row count (prefill chunks too).
- int8 (:class:`~loom.runtime.quantization.int8.Int8Linear`) keeps its ``[N, K]`` int8 rows and
  bfloat16 scales, read by Loom's Triton kernel
  (:func:`loom.runtime.kernels.cuda_int8_linear.w8a16_linear`) at every row count.
- The int8 embedding rows and everything left in float move with ``Module.to``.
"""

from __future__ import annotations

import functools

import torch

from loom.runtime.quantization.int8 import ACT_DTYPE

INNER_K_TILES = (8, 4, 2)  # tinygemm's choices, largest first: K must be a multiple of 16 * inner_k_tiles
_PROBE_N, _PROBE_K, _PROBE_GROUP = 64, 256, 32


def inner_k_tiles(k: int) -> int:
    """tinygemm's ``inner_k_tiles`` for ``k`` input channels: the largest of :data:`INNER_K_TILES` dividing ``k / 16``.

    Raises:
        ValueError: ``k`` not a multiple of 32.
    """
    for tiles in INNER_K_TILES:
        if k % (16 * tiles) == 0:
            return tiles
    raise ValueError(f"int4 on CUDA: {k} input channels are not a multiple of 32 (tinygemm's tile)")


def tinygemm_pack(codes: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``codes [N, K]`` uint8 in [0, 15] (CPU) -> tinygemm's packed int32 weight on ``device``.

    Raises:
        ValueError: ``N`` not a multiple of 8 or ``K`` of 32.
        RuntimeError: the nibble order cannot be established (:func:`tinygemm_nibble_order`).
    """
    n, k = codes.shape
    if n % 8:
        raise ValueError(f"int4 on CUDA: {n} output channels are not a multiple of 8 (tinygemm's tile)")
    tiles = inner_k_tiles(k)
    return _pack(codes, device, tiles, tinygemm_nibble_order(device.index or 0))


def _pack(codes: torch.Tensor, device: torch.device, tiles: int, even_high: bool) -> torch.Tensor:
    even, odd = codes[:, 0::2].to(torch.uint8), codes[:, 1::2].to(torch.uint8)
    pairs = (even << 4 | odd) if even_high else (odd << 4 | even)
    return torch.ops.aten._convert_weight_to_int4pack(pairs.contiguous().to(device), tiles)


def tinygemm_matmul(x: torch.Tensor, packed: torch.Tensor, group_size: int,
                    scales_and_zeros: torch.Tensor) -> torch.Tensor:
    """``x [M, K]`` bfloat16 -> ``x W^T`` ``[M, N]`` bfloat16 through tinygemm."""
    return torch.ops.aten._weight_int4pack_mm(x, packed, group_size, scales_and_zeros)


def tinygemm_dequantize(packed: torch.Tensor, k: int, group_size: int, scales_and_zeros: torch.Tensor) -> torch.Tensor:
    """The ``[N, K]`` bfloat16 weight tinygemm multiplies by (the identity through the kernel: each output is one
    product ``1 * w``, so exactly ``w`` rounded to bfloat16)."""
    eye = torch.eye(k, dtype=ACT_DTYPE, device=packed.device)
    return tinygemm_matmul(eye, packed, group_size, scales_and_zeros).t().contiguous()


@functools.cache
def tinygemm_nibble_order(device_index: int) -> bool:
    """Whether tinygemm on CUDA device ``device_index`` reads the even input channel of a byte from its high nibble
    (``True``, as torchao packs) or its low one, probed once on a random grid against its dequantized weight.

    Raises:
        RuntimeError: neither order reproduces the probe (no tinygemm in this build, or a layout Loom does not
            know), or the device is older than sm80.
    """
    device = torch.device("cuda", device_index)
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (_PROBE_N, _PROBE_K), dtype=torch.uint8, generator=gen)
    groups = _PROBE_K // _PROBE_GROUP
    scales = (torch.rand(groups, _PROBE_N, generator=gen) + 0.5).to(ACT_DTYPE)
    zeros = torch.randn(groups, _PROBE_N, generator=gen).to(ACT_DTYPE)
    expect = ((codes.float().view(_PROBE_N, groups, _PROBE_GROUP) - 8) * scales.t().float()[..., None]
              + zeros.t().float()[..., None]).view(_PROBE_N, _PROBE_K)
    sz = torch.stack([scales, zeros], dim=-1).contiguous().to(device)
    for even_high in (True, False):
        try:
            packed = _pack(codes, device, inner_k_tiles(_PROBE_K), even_high)
            got = tinygemm_dequantize(packed, _PROBE_K, _PROBE_GROUP, sz).float().cpu()
        except RuntimeError as exc:
            raise RuntimeError(f"int4 on CUDA: PyTorch's tinygemm kernel does not run here ({exc})") from exc
        if (got - expect).abs().max() <= 0.01 * expect.abs().max():  # the other order is off by whole codes
            return even_high
    raise RuntimeError("int4 on CUDA: this PyTorch build's tinygemm layout is not one Loom knows")
