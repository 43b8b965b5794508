"""A child process that counts its own threads: for the tests that OpenMP workers are let go
(``loom.runtime.threads.release_openmp_threads``).  The suite pins torch to one thread, which starts no
worker, so the child runs with two."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PRELUDE = '''
import os, sys, time, torch
torch.set_num_threads(2)
def tasks():  # the process's threads, once no thread has started or ended for 0.2 s
    seen = [len(os.listdir("/proc/self/task"))]
    while len(seen) < 2 or seen[-1] != seen[-2]:
        time.sleep(0.2)
        seen.append(len(os.listdir("/proc/self/task")))
    return seen[-1]
'''

needs_two_cpus = pytest.mark.skipif(not Path("/proc/self/task").is_dir() or len(os.sched_getaffinity(0)) < 2,
                                    reason="counts a process's threads in /proc on a machine with two CPUs or more")


def run_probe(body: str, *args: str) -> list[str]:
    """What ``body`` (run after :data:`PRELUDE`, ``sys.argv[1:]`` = ``args``) prints, split on whitespace."""
    out = subprocess.run([sys.executable, "-c", PRELUDE + body, *args], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "2"}, check=True)
    return out.stdout.split()
