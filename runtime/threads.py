"""CPU thread count: torch intra-op threads = physical cores this process may run on.

torch's own default counts the machine's physical cores, even when the
process is confined to fewer (CPU affinity, ``taskset``, a container's
cpuset), and oversubscribed OpenMP threads spin against each other: on a
loaded 2-core machine two threads waiting on each other make each op several
times slower.  ``LLMEngine`` calls :func:`cap_cpu_threads` on CPU, which only
ever lowers the count (a user's ``torch.set_num_threads(1)`` or
``OMP_NUM_THREADS`` stays as set); benchmarks print what they used.

**One OpenMP team at a time.**  GNU OpenMP (the runtime torch's Linux wheels ship) keeps, for every
thread that has run a parallel region, a pool of worker threads, and once the process's OpenMP
threads outnumber its CPUs it stops spin-waiting at barriers (the ``GOMP_SPINCOUNT`` entry of the
libgomp manual: 100 spins instead of 300,000) and puts every worker to sleep on a futex between
regions.  A decode step is hundreds of short regions, so each then pays a sleep and a wake-up.  That
is what happens when an engine thread (``AsyncLLM``, ``loom serve``) steps the model after the
thread that loaded it, or one that embedded documents, has run parallel regions: on 2 cores
Qwen2.5-Coder-0.5B int8 decoded 15 tokens/s through ``loom serve`` against 31 with ``LLM.generate``
on the main thread, and one int8 GEMV took 178 against 73 µs, with two context switches a call.
:func:`release_openmp_threads` lets the calling thread's workers go (OpenMP 5.0's
``omp_pause_resource_all``); ``AsyncLLM`` calls it in the thread that built the engine, ``LLM`` after
loading and after each ``generate``, and the embedder after a multi-threaded batch, so the thread
stepping the engine has the only team.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)


def _threads_per_core() -> int:
    siblings = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
    try:
        text = siblings.read_text().strip()
    except OSError:
        return 1
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return max(1, count)


def default_num_threads() -> int:
    """Physical cores available to this process (``OMP_NUM_THREADS`` wins when set)."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    return max(1, logical // _threads_per_core())


def cap_cpu_threads() -> int:
    """Lower torch's intra-op threads to :func:`default_num_threads` if above it; returns the count."""
    import torch

    cap = default_num_threads()
    if torch.get_num_threads() > cap:
        logger.info("torch threads %d -> %d (physical cores available)", torch.get_num_threads(), cap)
        torch.set_num_threads(cap)
    return torch.get_num_threads()


#: ``omp_pause_soft`` of OpenMP 5.0's ``omp_pause_resource_t``
_OMP_PAUSE_SOFT = 1


@functools.cache
def _omp_pause_resource_all() -> Callable[[int], int] | None:
    """``omp_pause_resource_all`` of the OpenMP runtime torch loaded (found through ``libtorch_cpu``'s
    dependencies, whatever the runtime's file is called), or ``None`` when there is none (a build without
    OpenMP, a runtime older than OpenMP 5.0)."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    for pattern in ("libtorch_cpu.*", "libgomp*", "libomp*", "libiomp*"):
        for path in sorted(lib.glob(pattern)):
            try:
                fn = ctypes.CDLL(str(path)).omp_pause_resource_all
            except (OSError, AttributeError):
                continue
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            return fn
    return None


def release_openmp_threads() -> bool:
    """Let go of the OpenMP worker threads that the calling thread's parallel regions started (module
    docstring); its next parallel region starts them again (about 0.1 ms).  Call it between regions only,
    never inside one.  Returns whether the runtime let them go (``False``: no OpenMP runtime with
    ``omp_pause_resource_all``, or it refused)."""
    fn = _omp_pause_resource_all()
    return fn is not None and fn(_OMP_PAUSE_SOFT) == 0
