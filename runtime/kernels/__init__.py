"""Loom's compiled CPU kernels: paged attention that reads the KV cache in place, the int8 and int4
weight-only products of decode steps (:func:`cpu_int8_linear`, :func:`cpu_int4_linear`), and the fused
norm / rotary + KV write / SiLU steps of a quantized layer (:func:`cpu_fused_layer_ops`).

Why a kernel of our own: the PyTorch reference path (``loom.runtime.attention``
gathers every block into a workspace, then SDPA) takes 3.0 / 24.0 ms at
context 1,024 / 4,096 tokens; PyTorch FlexAttention compiled for the CPU
(inductor C++, paged ``BlockMask``) 2.7 / 27.5 ms, i.e. no better; this kernel
1.7 / 10.5 ms.  It is memory-bound (16 GB/s of the VM's ~24 GB/s read
bandwidth at 4,096), the gather path moves every byte three times.

How it is built: ``torch.utils.cpp_extension.load`` compiles
``paged_attention_cpu.cpp``, ``int8_linear_cpu.cpp``, ``int4_linear_cpu.cpp`` and
``fused_layer_cpu.cpp`` into one library once per machine (about 7 s on 2 cores: it includes
ATen and the op registry only, g++ with ``-O3 -march=native -fopenmp``;
threads come from ``at::parallel_for``, i.e. ``torch.set_num_threads``) into
``$LOOM_CACHE/torch_extensions/<name>`` (built in a temporary folder, renamed
into place; later processes load the library directly), the name hashing the
sources, the compiler flags, torch's version and the CPU's flags so a cache
copied to another machine is never reused.  The library registers the
PyTorch operators ``torch.ops.loom.paged_attention``, ``int8_linear``, ``int4_linear``, ``add_rms_norm``,
``rope_kv_write`` and ``silu_mul`` (``TORCH_LIBRARY``, as
vLLM registers its kernels), so it goes through the dispatcher like any aten
op (about 2 us a call more than a pybind11 function).  Without a C++ compiler (or with
``LOOM_CPU_ATTENTION_KERNEL=0``) :func:`cpu_paged_attention` returns ``None``
and the engine uses the reference path, saying so once in the log.

Scope: float32 only; query chunks of up to ``KERNEL_MAX_QUERY_LEN`` tokens
(decodes, drafted tokens under speculative decoding, short suffixes).  Per
block and KV head, when at least 8 (query, query head) rows attend to it, the
block's keys are transposed once so 16 tokens' scores are one vector per row
accumulated over ``head_dim`` (GEMM-style), and P.V keeps the output row in
registers; decode-like tiles keep one dot product per (row, token).  Longer
prefill chunks keep gather + SDPA: there the copy is O(context) against
O(chunk x context) arithmetic, and SDPA's GEMMs stay about 2x faster than
this kernel.  Measured per layer, ``small`` shapes, 1 thread (``python -m
benchmarks.attention_kernel``; kernel / reference, ms): batch 16
decodes at 1,024 tokens 3.1 / 9.3; batch 16 x 4 queries 9.5 / 11.5; batch 16 x
8 queries 12.9 / 14.4 (before the transposed path 17.2); one 16-query chunk
over 544 tokens 0.80 / 0.52 (before 1.04); 32 queries 1.33 / 0.76; 512 over
1,024 29.7 / 14.5.  So the kernel attends what it wins on, the reference the
rest, and the equality tests run it on long chunks too.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import threading
from collections.abc import Callable
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

KERNEL_MAX_QUERY_LEN = 16
"""Longest query chunk (tokens) a request may have this step to go through the kernel."""

_SOURCES = tuple(Path(__file__).with_name(f) for f in ("paged_attention_cpu.cpp", "int8_linear_cpu.cpp",
                                                      "int4_linear_cpu.cpp", "fused_layer_cpu.cpp"))
_HEADERS = (Path(__file__).with_name("q8_0.h"),)
_CFLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-mprefer-vector-width=512")
_LDFLAGS = ("-lmvec",)
_lock = threading.Lock()
_loaded: dict[str, bool] = {}  # build name -> whether its library is loaded


@functools.cache
def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


@functools.cache
def _build_name() -> str:
    """The build's name; hashes the sources and ``/proc/cpuinfo``, so computed once per process."""
    key = hashlib.sha256()
    for part in (*(f.read_bytes() for f in _SOURCES + _HEADERS), " ".join(_CFLAGS + _LDFLAGS).encode(),
                 _cpu_flags().encode(), platform.machine().encode(), torch.__version__.encode()):
        key.update(part)
    return f"loom_cpu_kernels_{key.hexdigest()[:12]}"


def _library() -> bool:
    """Whether the kernels' library is loaded, building it on first use (never raises)."""
    with _lock:
        name = _build_name()
        if name not in _loaded:
            _loaded[name] = _build(name)
        return _loaded[name]


def cpu_paged_attention() -> Callable[..., torch.Tensor] | None:
    """The compiled kernel, built on first use; ``None`` when it cannot be had.

    The callable is ``fn(q, k_cache, v_cache, q_start, q_len, ctx_len,
    block_tables, block_size, scale, window) -> out`` with

    * ``q``: ``[T, Hq, D]`` float32, contiguous;
    * ``k_cache`` / ``v_cache``: ``[num_blocks * block_size, Hkv, D]`` float32;
    * ``q_start`` / ``q_len`` / ``ctx_len``: ``[N]`` int32 — request ``n``'s
      rows of ``q`` and its context length in tokens (this step's included);
    * ``block_tables``: ``[N, W]`` int32 block ids, padded;
    * ``block_size`` (tokens), ``scale`` (softmax scale), ``window`` (sliding
      window in tokens, ``0`` for none);
    * ``out``: ``[T, Hq, D]`` float32; rows outside every request are undefined.

    Never raises: a failed build is logged once and gives ``None``.
    """
    if os.environ.get("LOOM_CPU_ATTENTION_KERNEL", "1") == "0" or not _library():
        return None
    kernel: Callable[..., torch.Tensor] = torch.ops.loom.paged_attention.default
    return kernel


def cpu_int8_linear() -> Callable[..., torch.Tensor] | None:
    """The int8 weight-only product of a few activation rows, built on first use; ``None`` without a build.

    ``fn(x, q, scale, q8_0=False) -> y`` computes ``y = x @ (q * scale[:, None]).T`` with ``x`` ``[M, K]`` float32,
    ``q`` ``[N, K]`` int8, ``scale`` ``[N]`` bfloat16 (all contiguous) and ``y`` ``[M, N]`` float32, one
    dot product per row and output whatever ``M`` is (a row's result does not depend on its batch); a bad
    shape or dtype raises ``RuntimeError``.  Where :func:`int8_linear_quantizes_activations` says so (AVX-512
    VNNI or AVX2, ``K`` a multiple of 64) ``x`` is first rounded to int8 in blocks of 32 with a float32 scale each
    (llama.cpp's Q8_0, the activation format of its own Q8_0 and Q4 products) and the products are integer
    (``vpdpbusd``): about 0.5% relative error against the float32 product for Gaussian rows, and on SmolLM2 int8
    a perplexity of 14.947 against 14.934 with float32 activations (float32's own: 14.863), every position
    decoded through it.  With AVX2 alone the codes are 7-bit (:func:`int8_linear_activation_max_code`) and the
    products ``vpmaddubsw`` + ``vpmaddwd``, four weight rows a pass: 1.1% relative error for Gaussian rows, and
    about 1.25x the 8-bit sign trick's rate at 32 rows (see ``int8_linear_cpu.cpp``); ``q8_0=True`` keeps Q8_0's
    codes there too, through the sign trick (the LM head's: ``Int8Linear.q8_0_activations``).  Otherwise the weights are
    widened to float32 and summed in float32 (an error of ~2e-6).

    Why a kernel of Loom's own: at batch-1 decode the int8 LM head of the int8 and int4 formats
    (SmolLM2's ``[49152, 576]``, 27 MiB) took 4.1-6.1 ms a token in ``aten::_weight_int8pack_mm`` with
    its bfloat16 activations, about a quarter of the int4 model's step.  The float32 loop read the weight at
    19-22 GB/s at 2 threads on a Zen 4, under the 30-36 GB/s the cores read; integer products take it to
    the memory's rate: decode at 2 threads, medians of 5 interleaved rounds (float32 loop -> int8
    activations), SmolLM2 int8 84.7 -> 98.0 tok/s at batch 1 and 235.0 -> 365.6 at batch 8,
    Qwen2.5-Coder-0.5B int8 37.8 -> 46.0 and 77.8 -> 149.1, and the int4 formats, whose head is int8,
    1.03-1.06x at batch 1 and 1.13-1.27x at batch 8.  On an AVX2 Zen 3 (no AVX-512), where the float32 loop
    was the only path, integer products took Qwen2.5-Coder-0.5B int8 from 20.3 to 31.5-37 tok/s at batch 1
    (a 27 MiB matrix at copy bandwidth: 0.87-0.9 ms against PyTorch's 2.6-3.3 ms).
    ``python -m benchmarks.int8_linear [THREADS]`` times it per matrix against PyTorch's.
    """
    if not _library():
        return None
    kernel: Callable[..., torch.Tensor] = torch.ops.loom.int8_linear.default
    return kernel


def int8_linear_quantizes_activations(k: int) -> bool:
    """Whether :func:`cpu_int8_linear` rounds ``x`` to int8 blocks for an input size of ``k`` (the kernel is
    built with ``-march=native``: integer dot products on this CPU, :func:`cpu_integer_dot`, and ``k`` a
    multiple of 64)."""
    return int8_linear_activation_max_code(k) is not None


def int8_linear_activation_max_code(k: int, q8_0: bool = False) -> int | None:
    """The largest code of the blocks :func:`cpu_int8_linear` rounds ``x`` to for an input size of ``k``: 127
    (Q8_0) with AVX-512 VNNI or when asked for (``q8_0``), else 63 with AVX2 alone (7-bit codes, what
    ``vpmaddubsw`` against an unsigned weight byte takes without saturating), ``None`` where it keeps float32
    activations (no integer dot product, or ``k`` not a multiple of 64).  A block's scale is its ``max|x|``
    over that code."""
    if k % 64:
        return None
    return {"avx512_vnni": 127, "avx2": 127 if q8_0 else 63}.get(cpu_integer_dot() or "")


def cpu_integer_dot() -> str | None:
    """Which integer dot product the kernels use on this CPU: ``"avx512_vnni"`` (``vpdpbusd``, 64 bytes an
    instruction), ``"avx2"`` (``vpmaddubsw`` + ``vpmaddwd``, as llama.cpp's AVX2 paths: Zen 1-3 and Intel's
    client cores, which have no AVX-512), or ``None`` (float32 loops in the int8 kernel; no int4 kernel)."""
    flags = _cpu_flags().split()
    if "avx512_vnni" in flags and "avx512bw" in flags:
        return "avx512_vnni"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    return None


def cpu_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX): there PyTorch's bfloat16 GEMM is
    the fastest for a quantized layer's prefill chunk; elsewhere oneDNN emulates it (on an AVX2 Zen 3, a
    ``[512, 896] x [896, 4864]`` product took 340 ms in bfloat16 against 71 ms in float32), and the layers
    dequantize to float32 instead (:func:`loom.runtime.quantization.int8.prefill_dtype`)."""
    flags = _cpu_flags().split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_int4_linear() -> Callable[..., torch.Tensor] | None:
    """The int4 weight-only product of a few activation rows in Loom's tile layout; ``None`` without a build
    or on a CPU with neither AVX-512 VNNI nor AVX2 (:func:`cpu_integer_dot`; ``Int4Linear`` then keeps
    PyTorch's kernel and its layout).

    ``fn(x, tiles, scales_zeros, exponents, group_size) -> y``: ``x`` ``[M, K]`` float32, ``tiles``
    ``[N / 16, K / 8, 64]`` uint8, ``scales_zeros`` ``[N / 16, K / group_size, 2, 16]`` uint8 codes and
    ``exponents`` ``[N / 16, ceil(K / group_size / 8), 2, 16]`` int8 (``loom.runtime.quantization.int4.to_tiles``
    builds them from a layer's codes, scales and zeros), ``y`` ``[M, N]`` float32 ``= Q8_0(x) @ W^T`` with
    ``W = (q - 8) * scale + zero``,
    ``K`` and ``group_size`` multiples of 32; a bad shape or dtype raises ``RuntimeError``.  The layout and
    the arithmetic are in ``int4_linear_cpu.cpp``: activations rounded to llama.cpp's Q8_0 blocks, as in
    :func:`cpu_int8_linear`, and integer products of the unpacked 4-bit codes (``vpdpbusd``; on AVX2
    ``vpmaddubsw`` + ``vpmaddwd``), sixteen output rows a pass.

    Why a kernel of Loom's own: PyTorch's ``_weight_int4pack_mm_for_cpu`` widens every weight to float
    and read SmolLM2's int4 layers at about 14 GB/s at batch 1 and 2 threads, under the 30-36 GB/s
    the cores read; it was half of the int4 step (3.9 of 7.9 ms a token).
    """
    if cpu_integer_dot() is None or not _library():
        return None
    kernel: Callable[..., torch.Tensor] = torch.ops.loom.int4_linear.default
    return kernel


def cpu_fused_layer_ops() -> bool:
    """Whether ``torch.ops.loom.add_rms_norm``, ``rope_kv_write`` and ``silu_mul`` are available (built on first
    use; ``False`` without a build or with ``LOOM_FUSED_LAYERS=0``).  What they compute, and the shapes and dtypes
    they take: ``fused_layer_cpu.cpp``; where they run: :mod:`loom.runtime.models.fused_forward`."""
    return os.environ.get("LOOM_FUSED_LAYERS", "1") != "0" and _library()


def _build(name: str) -> bool:
    """Load the kernel from the cache, compiling it there first when missing.

    The build runs in a temporary folder renamed into place when done
    (``build_atomically``), so a process killed mid-build leaves no half-built
    library and no stale lock behind; a finished build is loaded directly,
    without torch's JIT machinery (which takes a lock file on every load).
    """
    from loom.runtime.checkpoint.cache import build_atomically, loom_cache_root

    library = f"{name}.so"

    def compile_into(folder: Path) -> None:
        from torch.utils.cpp_extension import load

        # copies: torch's ``load`` appends its own flags to the lists it is given;
        # is_python_module=False: the library only registers operators (loaded below)
        load(name=name, sources=[str(f) for f in _SOURCES], extra_cflags=list(_CFLAGS), extra_ldflags=list(_LDFLAGS),
             build_directory=str(folder), verbose=False, is_python_module=False)

    try:
        folder = build_atomically(loom_cache_root() / "torch_extensions" / name, compile_into, marker=library)
        if not hasattr(torch.ops.loom, "paged_attention"):  # a build in this process loaded it already
            torch.ops.load_library(str(folder / library))
    except Exception as exc:  # noqa: BLE001 - no compiler, no headers: fall back, say why
        logger.warning("CPU kernel unavailable (%s); using the gather + SDPA attention path, PyTorch's int8 "
                       "kernel and eager quantized layers",
                       str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        return False
    return True
