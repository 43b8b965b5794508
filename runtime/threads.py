"""CPU thread count: torch intra-op threads = physical cores this process may run on.

torch's own default counts the machine's physical cores, even when the
process is confined to fewer (CPU affinity, ``taskset``, a container's
cpuset), and oversubscribed OpenMP threads spin against each other: on a
loaded 2-core machine two threads waiting on each other make each op several
times slower.  ``LLMEngine`` calls :func:`cap_cpu_threads` on CPU, which only
ever lowers the count (a user's ``torch.set_num_threads(1)`` or
``OMP_NUM_THREADS`` stays as set); benchmarks print what they used.
"""

from __future__ import annotations

import logging
import os
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
