"""int4 weight-only linear layer: asymmetric, one scale and zero per group of input channels.

The layout is tinygemm's, which PyTorch's CPU kernel reads:
``_convert_weight_to_int4pack_for_cpu(q [N, K] int32 in [0, 15], inner_k_tiles)``
packs the codes, and ``_weight_int4pack_mm_for_cpu(x [M, K], packed, group_size,
scales_and_zeros [K / group_size, N, 2])`` computes ``x @ W^T`` with
``W[n, k] = (q[n, k] - 8) * scale[g, n] + zero[g, n]``, ``g = k // group_size``.

PyTorch's kernel is a decode kernel (few rows).  From :data:`GEMM_MIN_ROWS` rows on
(prefill chunks) :class:`Int4Linear` then unpacks its codes to a weight in
:func:`~loom.runtime.quantization.int8.prefill_dtype` (bfloat16 where the CPU multiplies
it natively, else float32) and calls that GEMM, as
:class:`~loom.runtime.quantization.int8.Int8Linear` does.  Unpacking reads the packed
layout of PyTorch's CPU kernel: per block of 64 output rows (its AVX-512 build; 32 in its
AVX2 build), per input channel, 32 (16) bytes whose low nibbles are the block's first
half of rows and high nibbles its second.  :func:`packed_block_rows` finds that layout
once per process on a probe, so a build that packs otherwise keeps the kernel path for
every row count instead of computing with wrong weights.

Scales and zeros live on an 8-bit block grid (:func:`snap_to_block_grid`): each is an
integer code (scales in [1, 255], zeros in [-127, 127]) times a power of two that
:data:`EXPONENT_GROUPS` groups of a row share, the shared-exponent idea of llama.cpp's
K-quants (one float scale over eight 6-bit sub-block scales).  Such values are exact in
bfloat16, so PyTorch's kernel reads them as ``scales_and_zeros`` unchanged, while Loom's
tiles hold them as one byte each plus the exponents: 4.56 bits a weight at group 32
instead of 5 (bfloat16 scale and zero per 32 weights), and a batch-1 decode step reads
about 9% fewer bytes of its projections.  :func:`quantize_int4` searches its clipping on
that grid, so the codes fit the values computed with.

Where Loom's own int4 kernel is built (:func:`loom.runtime.kernels.cpu_int4_linear`: AVX-512
VNNI or AVX2), :meth:`Int4Linear.use_tiles` moves a layer to that kernel's tile layout
(``int4_linear_cpu.cpp``) once it is loaded: the same codes, scales and zero points, so
the same grid, in 16-row tiles whose bytes the kernel reads with integer dot products
of Q8_0-rounded activations, for decode rows and prefill chunks alike.  The quantized cache keeps PyTorch's layout (it is what a
build without the kernel reads); the loader converts (:func:`loom.runtime.quantization.use_cpu_kernel_layouts`).

On a CUDA device :meth:`Int4Linear.use_tinygemm` moves a layer to PyTorch's CUDA tinygemm kernel and its
packed layout (:mod:`loom.runtime.quantization.cuda`), again the same grid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from loom.runtime.quantization.cuda import tinygemm_dequantize, tinygemm_matmul, tinygemm_pack
from loom.runtime.quantization.int8 import ACT_DTYPE, GEMM_MIN_ROWS, gemm, prefill_dtype

GROUP_SIZES = (32, 64, 128)
# Fractions of a group's [min, max] range tried by the clipping search; 1.0 is plain min-max.
CLIP_RATIOS = (1.0, 0.97, 0.94, 0.91, 0.88, 0.85, 0.82, 0.79)
# Weights quantized per step: its float32 temporaries (4 MiB each) are reused in place across the clipping
# search, where [4096, K] ones were allocated afresh per operation (quantize_int4: 72 against 17 M weights/s)
_CHUNK_WEIGHTS = 1 << 20
_PACK_ROWS = 64  # output rows per packed block (PyTorch's AVX-512 int4 CPU layout)
_TILE_ROWS = 16  # output rows per tile of Loom's int4 kernel
EXPONENT_GROUPS = 8  # groups of a row whose scale (and zero) codes share one power-of-two exponent
SCALE_CODE_MAX = 255  # scale codes are uint8 in [1, 255]
ZERO_CODE_MAX = 127  # zero codes are int8 in [-127, 127]
_layout_rows: int | None = None  # packed_block_rows(), 0 once probed and unknown
logger = logging.getLogger(__name__)


def unpack_codes(packed: torch.Tensor, n: int, k: int, block_rows: int | None = None) -> torch.Tensor:
    """The ``[N, K]`` uint8 codes in [0, 15] of ``packed`` (``_convert_weight_to_int4pack_for_cpu``'s ``[N, K / 2]``
    uint8), for ``N`` divisible by 64.  PyTorch packs blocks of ``block_rows`` output rows (its AVX-512 build 64,
    its AVX2 build 32: per input channel, ``block_rows / 2`` bytes whose low nibbles are the block's first half of
    rows and high nibbles its second); ``None`` takes this build's (:func:`packed_block_rows`).  Another layout
    gives wrong codes (see :func:`packed_layout_is_known`)."""
    rows = block_rows or packed_block_rows() or _PACK_ROWS
    blocks = packed.view(n // rows, k, rows // 2)
    codes = torch.cat([blocks & 15, blocks >> 4], dim=2)  # [N / rows, K, rows]
    return codes.transpose(1, 2).reshape(n, k)


def to_tiles(codes: torch.Tensor, scales_and_zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loom's int4 kernel layout of ``codes [N, K]`` (uint8 in [0, 15]) and ``scales_and_zeros [K / G, N, 2]``:
    :func:`tile_codes` and :func:`tile_scales_zeros` (``(tiles, scale_zero_codes, exponents)``).

    Raises:
        ValueError: the scales and zeros are not on the block grid (:func:`tile_scales_zeros`).
    """
    return tile_codes(codes), *tile_scales_zeros(scales_and_zeros)


def tile_codes(codes: torch.Tensor) -> torch.Tensor:
    """``codes [N, K]`` uint8 in [0, 15] -> ``tiles [N / 16, K / 8, 64]`` uint8: byte ``4r + i`` of step ``j``
    holds row ``r``'s codes at inputs ``8j + i`` (low nibble) and ``8j + 4 + i`` (high nibble).  ``N`` a
    multiple of 16, ``K`` of 8."""
    n, k = codes.shape
    c = codes.view(n // _TILE_ROWS, _TILE_ROWS, k // 8, 2, 4).permute(0, 2, 1, 4, 3)  # [T, K / 8, r, i, half]
    return (c[..., 0] | (c[..., 1] << 4)).reshape(n // _TILE_ROWS, k // 8, 64).contiguous()


def tile_scales_zeros(scales_and_zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[K / G, N, 2]`` bfloat16 on the block grid (:func:`snap_to_block_grid`) -> its codes and exponents in
    tiles: ``scale_zero_codes [N / 16, K / G, 2, 16]`` uint8 (per group a tile's 16 scale codes, then its 16 zero
    codes as two's-complement int8) and ``exponents [N / 16, ceil(K / G / 8), 2, 16]`` int8 (per block of
    :data:`EXPONENT_GROUPS` groups a tile's 16 scale exponents, then its 16 zero exponents).  Exact: every scale
    is ``code * 2**exponent``.

    Raises:
        ValueError: a scale or zero is not on the grid (weights quantized some other way).
    """
    groups, n, _ = scales_and_zeros.shape
    values = scales_and_zeros.float().permute(1, 0, 2)  # [N, G, 2]
    scale_exp, zero_exp = block_exponents(values[..., 0], SCALE_CODE_MAX), block_exponents(values[..., 1],
                                                                                         ZERO_CODE_MAX)
    scale_codes, scales = snap_to_block_grid(values[..., 0], scale_exp, 0, SCALE_CODE_MAX)
    zero_codes, zeros = snap_to_block_grid(values[..., 1], zero_exp, -ZERO_CODE_MAX, ZERO_CODE_MAX)
    if not (torch.equal(scales, values[..., 0]) and torch.equal(zeros, values[..., 1])):
        raise ValueError("int4: scales and zeros are not on the 8-bit block grid (quantize_int4 puts them there)")
    codes = torch.stack([scale_codes, zero_codes & 0xFF], dim=-1).to(torch.uint8)  # [N, G, 2]
    exponents = torch.stack([scale_exp, zero_exp], dim=-1).to(torch.int8)  # [N, S, 2]

    def tiled(t: torch.Tensor) -> torch.Tensor:  # [N, X, 2] -> [N / 16, X, 2, 16]
        return t.view(n // _TILE_ROWS, _TILE_ROWS, t.shape[1], 2).permute(0, 2, 3, 1).contiguous()

    return tiled(codes), tiled(exponents)


def from_tiles(tiles: torch.Tensor, scale_zero_codes: torch.Tensor,
               exponents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of :func:`to_tiles`: ``codes [N, K]`` uint8 and ``scales_and_zeros [K / G, N, 2]`` bfloat16."""
    t, steps, _ = tiles.shape
    halves = torch.stack([tiles & 15, tiles >> 4], dim=-1).view(t, steps, _TILE_ROWS, 4, 2)  # [T, K / 8, r, i, half]
    codes = halves.permute(0, 2, 1, 4, 3).reshape(t * _TILE_ROWS, steps * 8)
    groups = scale_zero_codes.shape[1]
    sz = scale_zero_codes.permute(0, 3, 1, 2).reshape(t * _TILE_ROWS, groups, 2).to(torch.int32)  # [N, G, 2]
    sz[..., 1] = torch.where(sz[..., 1] > ZERO_CODE_MAX, sz[..., 1] - 256, sz[..., 1])  # two's complement
    exp = exponents.permute(0, 3, 1, 2).reshape(t * _TILE_ROWS, -1, 2).repeat_interleave(EXPONENT_GROUPS, dim=1)
    values = torch.ldexp(sz.float(), exp[:, :groups].float())
    return codes, values.transpose(0, 1).to(ACT_DTYPE).contiguous()


def packed_layout_is_known() -> bool:
    """Whether this PyTorch build packs int4 codes as :func:`unpack_codes` reads them (probed once)."""
    return packed_block_rows() is not None


def packed_block_rows() -> int | None:
    """Rows per block of PyTorch's packed CPU int4 layout in this build and on this CPU: 64 (AVX-512), 32 (AVX2),
    or ``None`` when a probe packs in neither (probed once)."""
    global _layout_rows
    if _layout_rows is None:
        probe = torch.randint(0, 16, (2 * _PACK_ROWS, 64), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
        _layout_rows = 0
        try:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 1)
        except RuntimeError:
            return None
        for rows in (64, 32):
            if packed.shape == (probe.shape[0], probe.shape[1] // 2) and torch.equal(
                    unpack_codes(packed, probe.shape[0], probe.shape[1], block_rows=rows).to(torch.int32), probe):
                _layout_rows = rows
                break
    return _layout_rows or None


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric group-wise 4-bit quantization with a squared-error clipping search, its scales and zeros on
    the 8-bit block grid (:func:`snap_to_block_grid`).

    For each group, the range ``[lo, hi]`` is the group's ``[min, max]``
    shrunk about its centre by each of :data:`CLIP_RATIOS`; the ratio with the
    least squared error wins.  Each row's exponents (per :data:`EXPONENT_GROUPS`
    groups) fit its min-max scales and zeros; every candidate scale and zero is
    snapped onto that grid before its codes are chosen, so the codes fit the
    values the kernels compute with, and the error compared is the layer's.

    Args:
        weight: ``[N, K]`` float tensor, ``K`` divisible by ``group_size``.
        group_size: input channels per group (32, 64 or 128).

    Returns:
        ``(q, scales, zeros)``: ``q`` ``[N, K]`` uint8 in [0, 15]; ``scales``
        and ``zeros`` ``[N, K / group_size]`` bfloat16, with
        ``weight ≈ (q - 8) * scale + zero`` per group; each is exactly
        ``code * 2**e`` with ``e`` shared by :data:`EXPONENT_GROUPS` groups of a row
        (scale codes in [1, 255], zero codes in [-127, 127]).

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
    step = max(1, _CHUNK_WEIGHTS // k)
    for start in range(0, n, step):
        rows = slice(start, min(n, start + step))
        q[rows], scales[rows], zeros[rows] = _quantize_rows(weight[rows].detach().float(), group_size)
    return q, scales, zeros


def block_exponents(values: torch.Tensor, code_max: int) -> torch.Tensor:
    """``values [N, G]`` float -> ``[N, ceil(G / EXPONENT_GROUPS)]`` int32: per row and block of
    :data:`EXPONENT_GROUPS` groups, the least ``e`` in [-126, 127] with ``max |v| / 2**e <= code_max``."""
    n, groups = values.shape
    blocks = -(-groups // EXPONENT_GROUPS)
    padded = torch.zeros(n, blocks * EXPONENT_GROUPS, dtype=torch.float32)
    padded[:, :groups] = values.abs()
    top = padded.view(n, blocks, EXPONENT_GROUPS).amax(-1) / code_max
    mantissa, exponent = torch.frexp(top)  # top = mantissa * 2**exponent, mantissa in [0.5, 1)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)  # an exact power of two needs no more
    return exponent.clamp(-126, 127).to(torch.int32)


def snap_to_block_grid(values: torch.Tensor, exponents: torch.Tensor, code_min: int,
                       code_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``values [N, G]`` rounded to ``code * 2**e`` (``e`` from ``exponents [N, ceil(G / EXPONENT_GROUPS)]``, codes
    clamped to ``[code_min, code_max]``): ``(codes [N, G] int32, snapped [N, G] float32)``.

    This is the grid of an int4 layer's scales and zeros: 8-bit codes under a power-of-two exponent shared by
    :data:`EXPONENT_GROUPS` groups of a row (block floating point, as llama.cpp's K-quants share one float
    scale between eight sub-block scales of 6 bits).  ``code * 2**e`` is exact in bfloat16 (8 significant
    bits), so PyTorch's kernel, which reads bfloat16 scales and zeros, computes on the same weight as Loom's,
    which reads the codes and exponents: 4 + 16 / 32 + 16 / 256 bits a weight in Loom's tiles (group 32),
    against 5 with bfloat16 scales and zeros."""
    step = torch.ldexp(torch.ones(()), exponents.float()).repeat_interleave(EXPONENT_GROUPS, dim=1)
    step = step[:, :values.shape[1]]
    codes = torch.round(values / step).clamp(code_min, code_max)
    return codes.to(torch.int32), codes * step


def _quantize_rows(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, k = w.shape
    g = w.view(n, k // group_size, group_size)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)
    mid, half = (hi + lo) / 2, (hi - lo) / 2
    # the exponents fit min-max's scales and zeros (ratio 1.0: the widest), so no candidate's scale is clamped
    mm_scale = (hi - lo).clamp(min=1e-8) / 15
    scale_exp = block_exponents(mm_scale, SCALE_CODE_MAX)
    zero_exp = block_exponents(lo + 8 * mm_scale, ZERO_CODE_MAX)
    best_err = torch.full_like(lo, float("inf"))
    best_s, best_z = torch.zeros_like(lo), torch.zeros_like(lo)
    codes, residual = torch.empty_like(g), torch.empty_like(g)  # the two [n, groups, group_size] temporaries
    for ratio in CLIP_RATIOS:
        clo, chi = mid - half * ratio, mid + half * ratio
        scale = snap_to_block_grid(((chi - clo) / 15).clamp(min=1e-8), scale_exp, 1, SCALE_CODE_MAX)[1]
        zero = snap_to_block_grid(clo + 8 * scale, zero_exp, -ZERO_CODE_MAX, ZERO_CODE_MAX)[1]
        _codes(g, scale, zero, out=codes)
        torch.sub(codes, 8, out=residual).mul_(scale[..., None]).add_(zero[..., None]).sub_(g)
        err = residual.mul_(residual).sum(-1)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_s, best_z = torch.where(better, scale, best_s), torch.where(better, zero, best_z)
    return _codes(g, best_s, best_z, out=codes).to(torch.uint8).view(n, k), best_s.to(ACT_DTYPE), best_z.to(ACT_DTYPE)


def _codes(g: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``round((g - zero) / scale + 8)`` clamped to [0, 15], per group (``g [n, groups, size]``, ``scale`` and
    ``zero [n, groups]``), written into ``out`` (float32) in place."""
    return torch.sub(g, zero[..., None], out=out).div_(scale[..., None]).add_(8).round_().clamp_(0, 15)


class Int4Linear(nn.Module):
    """``y = x W^T + b`` with ``W`` stored as packed 4-bit codes (weight-only quantization).

    Shapes: ``x [T, K]`` in any float dtype -> ``[T, N]`` in ``x``'s dtype;
    ``packed`` is the kernel's opaque uint8 layout of ``[N, K]`` codes;
    ``scales_and_zeros [K / group_size, N, 2]`` bfloat16; ``bias [N]`` float32
    or ``None``.  After :meth:`use_tiles` the codes, scales and zeros are held as
    ``tiles`` / ``tile_scales_zeros`` / ``tile_exponents`` (:func:`to_tiles`) instead, and ``packed`` /
    ``scales_and_zeros`` are empty; after :meth:`use_tinygemm` ``packed`` is tinygemm's CUDA layout and
    ``scales_and_zeros`` sits on the same device.
    """

    packed: torch.Tensor
    scales_and_zeros: torch.Tensor
    tiles: torch.Tensor | None
    tile_scales_zeros: torch.Tensor | None
    tile_exponents: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int, in_features: int,
                 bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = scales_and_zeros.shape[1], in_features
        self.group_size = group_size
        self.register_buffer("packed", packed)
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.register_buffer("tiles", None)
        self.register_buffer("tile_scales_zeros", None)
        self.register_buffer("tile_exponents", None)
        self._tile_kernel: Callable[..., torch.Tensor] | None = None  # set by use_tiles
        self.tinygemm = False  # set by use_tinygemm: packed is tinygemm's CUDA layout
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

    def use_tiles(self) -> bool:
        """Move this layer to Loom's int4 kernel and its tile layout, where that kernel is built and the
        shapes fit (``N`` a multiple of 64, ``K`` and the group of 32); the same grid in the other layout, so
        the same weight.  The kernel then takes every row count, prefill chunks included: a 1,000-token
        prefill of Qwen2.5-Coder-1.5B took 6.1 s through it against 8.8 s unpacking the weight to bfloat16
        for the GEMM (SmolLM2: 0.90 s against 1.04 s; AVX-512 VNNI), and a token's result is the same in a
        prefill chunk and in a decode step.  On AVX2 too: 512 rows of Qwen2.5-Coder-0.5B's ``gate_up`` took
        45 ms in the kernel against 77 ms for the float32 GEMM alone (137 ms more to unpack the weight; Zen 3).  Returns whether the layer uses it (again ``True`` on a second call)."""
        from loom.runtime.kernels import cpu_int4_linear

        if self.tiles is not None:
            return True
        n, k, g = self.out_features, self.in_features, self.group_size
        kernel = cpu_int4_linear()
        if (kernel is None or n % _PACK_ROWS or k % 32 or g % 32 or not packed_layout_is_known()
                or self.packed.device.type != "cpu"):
            return False
        try:
            scale_zero_codes, exponents = tile_scales_zeros(self.scales_and_zeros)
        except ValueError:
            logger.warning("int4 layer [%d, %d]: scales and zeros off the block grid; PyTorch's int4 kernel "
                           "computes it", n, k)
            return False
        tiles = torch.empty(n // _TILE_ROWS, k // 8, 64, dtype=torch.uint8)
        for row in range(0, n, _PACK_ROWS):  # a block of rows at a time: no [N, K] temporaries at load
            block = unpack_codes(self.packed[row:row + _PACK_ROWS], _PACK_ROWS, k)
            tiles[row // _TILE_ROWS:(row + _PACK_ROWS) // _TILE_ROWS] = tile_codes(block)
        self._install_tiles(kernel, tiles, scale_zero_codes, exponents)
        return True

    def load_tiles(self, tiles: torch.Tensor, scale_zero_codes: torch.Tensor, exponents: torch.Tensor) -> None:
        """Take this layer's weight in the tile layout, as :meth:`use_tiles` left it and the quantized cache
        stored it (:func:`to_tiles`'s three tensors, on CPU): Loom's int4 kernel then computes it; where that kernel
        is not built, the same codes, scales and zeros are packed back into PyTorch's layout."""
        from loom.runtime.kernels import cpu_int4_linear

        kernel = cpu_int4_linear()
        if kernel is not None:
            self._install_tiles(kernel, tiles, scale_zero_codes, exponents)
            return
        codes, scales_and_zeros = from_tiles(tiles, scale_zero_codes, exponents)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)
        self.scales_and_zeros = scales_and_zeros
        self.tiles = self.tile_scales_zeros = self.tile_exponents = None

    def _install_tiles(self, kernel: Callable[..., torch.Tensor], tiles: torch.Tensor, scale_zero_codes: torch.Tensor,
                       exponents: torch.Tensor) -> None:
        self.tiles, self.tile_scales_zeros, self.tile_exponents = tiles, scale_zero_codes, exponents
        self._tile_kernel = kernel
        self.gemm_min_rows = None  # prefill chunks too: faster than unpacking to bfloat16 for the GEMM (see above)
        self.packed = torch.empty(0, dtype=torch.uint8)
        self.scales_and_zeros = torch.empty(0, dtype=ACT_DTYPE)

    def use_tinygemm(self, device: torch.device) -> None:
        """Move this layer to CUDA ``device`` in tinygemm's layout (:mod:`loom.runtime.quantization.cuda`): the same
        codes, scales and zero points.  Every row count then takes tinygemm.

        Raises:
            ValueError / RuntimeError: as :func:`~loom.runtime.quantization.cuda.tinygemm_pack`.
        """
        if self.tinygemm:
            return
        n, k = self.out_features, self.in_features
        if self.tiles is not None:
            codes, scales_and_zeros = from_tiles(*self._tile_tensors())
        elif n % _PACK_ROWS == 0 and packed_layout_is_known():
            codes, scales_and_zeros = unpack_codes(self.packed, n, k), self.scales_and_zeros
        else:
            raise RuntimeError("int4: this PyTorch build's packed CPU layout cannot be unpacked")
        self.packed = tinygemm_pack(codes, device)
        self.scales_and_zeros = scales_and_zeros.contiguous().to(device)
        self.tiles = self.tile_scales_zeros = self.tile_exponents = None
        self._tile_kernel, self.gemm_min_rows, self.tinygemm = None, None, True
        if self.bias is not None:
            self.bias = self.bias.to(device)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, K]`` bfloat16 -> ``x W^T`` ``[T, N]`` bfloat16, without the bias: Loom's int4 kernel after
        :meth:`use_tiles` (every row count); else PyTorch's; from ``gemm_min_rows`` rows
        the GEMM of the unpacked weight in :func:`~loom.runtime.quantization.int8.prefill_dtype`."""
        if self.tinygemm:
            return tinygemm_matmul(x, self.packed, self.group_size, self.scales_and_zeros)
        if self.gemm_min_rows is not None and x.shape[0] >= self.gemm_min_rows:
            return gemm(x, self.dequantize(prefill_dtype()))
        if self.tiles is not None:
            return self.tile_matmul(x.contiguous())
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group_size, self.scales_and_zeros)

    def tile_matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, K]`` float32 or bfloat16, contiguous -> ``Q8_0(x) W^T`` ``[T, N]`` in ``x``'s dtype through
        Loom's int4 kernel (after :meth:`use_tiles`; see :func:`loom.runtime.kernels.cpu_int4_linear`)."""
        assert self._tile_kernel is not None
        return self._tile_kernel(x, *self._tile_tensors(), self.group_size)

    def _tile_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(tiles, tile_scales_zeros, tile_exponents)`` after :meth:`use_tiles`."""
        assert self.tiles is not None and self.tile_scales_zeros is not None and self.tile_exponents is not None
        return self.tiles, self.tile_scales_zeros, self.tile_exponents

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight ``[N, K]`` this layer multiplies by, in ``dtype``: ``(q - 8) * scale + zero`` per group,
        computed in ``dtype``: in float32 it is exactly the grid the kernel computes on; the prefill GEMM asks for
        bfloat16 (one more rounding, 1.4x faster to unpack: SmolLM2's 1,000-token prefill 1.43 s against 1.56 s).
        In tinygemm's layout, the bfloat16 weight tinygemm computes with.

        Raises:
            RuntimeError: the packed layout is not the one :func:`unpack_codes` reads.
        """
        n, k, g = self.out_features, self.in_features, self.group_size
        if self.tinygemm:
            return tinygemm_dequantize(self.packed, k, g, self.scales_and_zeros).to(dtype)
        if self.tiles is not None:
            raw, scales_and_zeros = from_tiles(*self._tile_tensors())
        elif self.out_features % _PACK_ROWS or not packed_layout_is_known():
            raise RuntimeError("int4: this PyTorch build's packed layout cannot be unpacked")
        else:
            raw, scales_and_zeros = unpack_codes(self.packed, n, k), self.scales_and_zeros
        codes = raw.view(n, k // g, g).to(dtype) - 8
        sz = scales_and_zeros.transpose(0, 1).to(dtype)  # [N, K / g, 2]
        weight = torch.addcmul(sz[..., 1:], codes, sz[..., :1])  # zero + (q - 8) * scale
        return weight.reshape(n, k)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bits=4, " \
               f"group_size={self.group_size}"
