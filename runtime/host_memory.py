"""Where a CPU model's weights live in host memory: in transparent huge pages, and no freed heap left resident.

**Huge pages.**  A CPU decode step streams every weight once, and 4 KiB pages cost it.

A batch-1 decode step reads all of a model's weights (1.0 GiB for Qwen2.5-Coder-1.5B in int4) and little
else, so its speed is the memory bandwidth the matmuls reach.  In 4 KiB pages that stream crosses a page,
and takes a TLB miss and a page walk, every 4 KiB; in 2 MiB transparent huge pages (THP) it crosses one every
2 MiB.  Linux gives an anonymous mapping huge pages only when THP is ``always`` or, under the usual
``madvise`` setting (``/sys/kernel/mm/transparent_hugepage/enabled``), when the range was marked with
``madvise(MADV_HUGEPAGE)`` before its pages were first touched.  PyTorch's CPU allocator marks nothing
unless ``THP_MEM_ALLOC_ENABLE=1`` was set before its first allocation, which a library cannot count on.

:func:`use_huge_pages` therefore moves every contiguous CPU parameter and buffer of a loaded model into
one arena whose 2 MiB-aligned pages are marked ``MADV_HUGEPAGE`` before the copies touch them, each tensor
at a 64-byte aligned offset (the kernels' vector loads), one tensor at a time: an old tensor is freed as its
copy lands, so the load's peak grows by about its largest tensor, not by the model.  Values, shapes, dtypes and
strides are unchanged; only where the bytes live moves.  Tensors shared between modules (a tied embedding
and head) stay shared.  Measured in ``docs/engine.md`` ("Huge pages").

``LOOM_HUGE_PAGES=0`` turns it off (for that A/B).  Elsewhere than Linux, or where ``madvise`` fails, tensors
stay where they are.

**Freed heap.**  Loading frees many temporaries between allocations of tensors it keeps (float rows while
quantizing, the old copies while moving into the arena); glibc then serves later allocations from its heap
instead of fresh mappings (its dynamic mmap threshold), and the holes between kept tensors stay resident:
SmolLM2's int8 load grew by 3x its weights instead of 1.1x.  :func:`release_free_memory` (glibc
``malloc_trim``) returns them; the quantizing loader calls it after each layer, :func:`use_huge_pages` after
each tensor it moves.

**Zeroed memory on demand.**  :func:`zeros` is ``torch.zeros`` for a large CPU tensor without writing it:
an anonymous mapping, which the kernel fills with zero pages as they are first touched (``calloc``'s
way for large blocks).  The KV pool is sized up front (1 GiB by default on a CPU) and most of its blocks
wait for a long context; ``torch.zeros`` wrote all of it at engine start (0.7 s, and 1 GiB resident from
the first second), this maps it and leaves resident only the blocks a request writes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import mmap
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

HUGE_PAGE = 2 << 20  # bytes: x86-64 and arm64 transparent huge page size
ALIGN = 64  # bytes: each tensor's offset in the arena (AVX-512 vector loads)
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux


def enabled() -> bool:
    """Whether :func:`use_huge_pages` moves anything here: Linux, and ``LOOM_HUGE_PAGES`` is not ``0``."""
    return sys.platform == "linux" and os.environ.get("LOOM_HUGE_PAGES", "1") != "0"


def use_huge_pages(model: nn.Module) -> int:
    """Move ``model``'s contiguous CPU parameters and buffers into one huge-page arena, in place.

    Call it after loading and before the first forward (kernels that keep pointers would keep the old ones).

    Args:
        model: a loaded model on CPU.

    Returns:
        bytes of the arena (0 when :func:`enabled` is false, ``madvise`` refuses, or the tensors total
        under :data:`HUGE_PAGE`: nothing moves then).
    """
    if not enabled():
        return 0
    holders: dict[tuple, list[tuple[dict[str, Any], str]]] = {}  # each tensor, and the module tables holding it
    unique: dict[tuple, torch.Tensor] = {}
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, held in table.items():
                if held is not None and held.device.type == "cpu" and held.is_contiguous():
                    key = tensor_key(held)
                    unique.setdefault(key, held)
                    holders.setdefault(key, []).append((table, name))
    offsets, total = {}, 0
    for key, held in unique.items():
        offsets[key] = total
        total += -(-held.numel() * held.element_size() // ALIGN) * ALIGN
    if total < HUGE_PAGE:
        return 0
    arena = torch.empty(total + HUGE_PAGE, dtype=torch.uint8)  # untouched: no page is mapped yet
    base = (-arena.data_ptr()) % HUGE_PAGE
    if _libc().madvise(ctypes.c_void_p(arena.data_ptr() + base), ctypes.c_size_t(total), MADV_HUGEPAGE) != 0:
        return 0
    release_free_memory()  # the load's freed temporaries first: the peak is then the weights and one copy
    for key in sorted(unique, key=lambda k: -unique[k].numel() * unique[k].element_size()):  # largest first
        tensor = unique.pop(key)
        start = base + offsets[key]
        new = arena[start:start + tensor.numel() * tensor.element_size()].view(tensor.dtype).view(tensor.shape)
        new.copy_(tensor.detach())
        param = nn.Parameter(new, requires_grad=False)  # one object where one was shared (a tied head)
        for holder, name in holders[key]:  # every module holding it now holds the copy, and the old one is freed
            holder[name] = param if isinstance(holder[name], nn.Parameter) else new
        del tensor
        release_free_memory()  # the old copy's heap pages too, before the next copy touches more of the arena
    return total + HUGE_PAGE


def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous CPU tensor of ``shape`` and ``dtype`` holding zeros, in an anonymous mapping of its own
    whose pages are mapped (zero-filled by the kernel) when first touched, so none is resident until written.

    The mapping lives as long as the tensor (and views of it).  Equal to ``torch.zeros(shape, dtype=dtype)``,
    which it is where ``mmap`` has no private mappings (Windows).

    Raises:
        ValueError: ``shape`` has no elements (a mapping cannot be empty).
    """
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        raise ValueError(f"zeros: shape {shape} has no elements")
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows: no anonymous private mappings through this module
        return torch.zeros(shape, dtype=dtype)
    return torch.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype=dtype).view(shape)


def tensor_key(t: torch.Tensor) -> tuple[int, torch.dtype, tuple[int, ...]]:
    """What makes two tensor objects the same tensor here: address, dtype and shape (a tied head's view)."""
    return t.data_ptr(), t.dtype, tuple(t.shape)
@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


def release_free_memory() -> None:
    """Give the C heap's free pages back to the OS (glibc ``malloc_trim``; nothing elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
