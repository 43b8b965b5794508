"""int8 weight-only product of CUDA decode rows (W8A16): a Triton kernel of Loom's own.

``y [M, N] = (x [M, K] @ q [N, K]^T) * scales [N]`` with ``q`` int8 (per-output-channel symmetric grid of
:mod:`loom.runtime.quantization.int8`), ``x`` float32 or bfloat16 rounded to bfloat16 as it is loaded,
products on the tensor cores (``tl.dot``, bfloat16 in, float32 sums): the int8 codes are exact in
bfloat16, so the only rounding is the activations' and the sums'.

Why our own: PyTorch's CUDA ``_weight_int8pack_mm`` is one thread per output element, each walking all of
``K`` (``aten/src/ATen/native/cuda/int8mm.cu``), and torchao's int8 weight-only path relies on
``torch.compile`` to fuse the dequantization into the product; a decode step of Loom's eager engine
needs a kernel that reads each weight byte once.  ``python -m loom.runtime.bench.cuda --kernels``
times it beside cuBLAS bfloat16, PyTorch's kernel and tinygemm int4 on the model's own shapes.

Every row count: decode rows and prefill chunks alike (dequantizing a ``[151936, 1536]`` head to bfloat16
for cuBLAS took 1.45 ms a call at 64 rows on an H100, against cuBLAS's 0.21 ms on the bfloat16 weight).
At batch 1 one 64-column tile of a ``[1536, 8960]`` projection is too little work for 132 streaming
multiprocessors, so ``K`` is split (split-K, as CUTLASS's "split-K serial" and the Marlin kernels do)
until about two programs per multiprocessor run; each split writes float32 partial sums of its rows
(already scaled), and one ``sum`` over the splits finishes, so the result is deterministic (no atomics).

Triton is PyTorch's own CUDA dependency; without it (or on a CPU tensor) :func:`cuda_int8_linear`
returns ``None``.  ``TRITON_INTERPRET=1`` runs the kernel on CPU tensors (how the tests check its tiling,
splits and masks without a GPU), with float32 products there: the interpreter computes on numpy, which
has no bfloat16.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

BLOCK_N = 64  # output channels per program
BLOCK_K = 128  # input channels per loop step
PROGRAMS_PER_SM = 2


@functools.cache
def cuda_int8_linear() -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """``w8a16_linear`` where Triton imports, else ``None``."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    return w8a16_linear


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def w8a16_kernel(x_ptr, w_ptr, s_ptr, part_ptr, M, N, K, k_per_split,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BF16: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        offs_m = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        k_lo = pid_k * k_per_split
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(k_lo, k_lo + k_per_split, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :],
                        mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
            w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :],
                        mask=(offs_n[:, None] < N) & (offs_k[None, :] < K), other=0)
            if BF16:
                acc += tl.dot(x.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)))
            else:  # Triton's CPU interpreter: numpy has no bfloat16
                acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)))
        scale = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc * scale[None, :]
        tl.store(part_ptr + pid_k * M * N + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    return w8a16_kernel


def split_k(n: int, k: int, m_tiles: int, programs: int) -> int:
    """Input channels per split (a multiple of :data:`BLOCK_K`) so that ``n / BLOCK_N`` column tiles times
    ``m_tiles`` row tiles times the splits reach about ``programs`` programs (one split when the tiles do)."""
    tiles, k_steps = -(-n // BLOCK_N) * m_tiles, -(-k // BLOCK_K)
    splits = max(1, min(k_steps, -(-programs // tiles)))
    return -(-k_steps // splits) * BLOCK_K


@functools.cache
def _programs(device: torch.device) -> int:
    """Programs that keep ``device`` busy: :data:`PROGRAMS_PER_SM` per multiprocessor (4 "multiprocessors" on
    CPU, the interpreter, so the tests see several splits)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return PROGRAMS_PER_SM * sms


def w8a16_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``x [M, K]`` float32 or bfloat16, contiguous; ``qweight [N, K]`` int8 contiguous; ``scales [N]`` (any float
    dtype) -> ``(x @ qweight^T) * scales`` ``[M, N]`` in ``x``'s dtype, all on one device.  Tiles of 16, 32 or 64
    rows (by ``M``); split-K only while the tiles alone leave multiprocessors idle (decode rows).

    Raises:
        ValueError: ``K`` not ``qweight``'s.
    """
    m, k = x.shape
    n = qweight.shape[0]
    if qweight.shape[1] != k:
        raise ValueError(f"w8a16_linear: x {tuple(x.shape)} against weight {tuple(qweight.shape)}")
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    m_tiles = -(-m // block_m)
    k_per_split = split_k(n, k, m_tiles, _programs(x.device))
    splits = -(-k // k_per_split)
    # one split: the kernel stores x's dtype directly; several: float32 partial sums, then one sum
    out = torch.empty(splits, m, n, dtype=torch.float32 if splits > 1 else x.dtype, device=x.device)
    _kernel()[(-(-n // BLOCK_N), splits, m_tiles)](x, qweight, scales, out, m, n, k, k_per_split,
                                                   BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, BF16=x.is_cuda)
    return out[0] if splits == 1 else out.sum(0).to(x.dtype)
