"""CPU thread default: physical cores available, never raising a count the user set."""

from __future__ import annotations

import os

import torch

from loom.runtime.threads import cap_cpu_threads, default_num_threads


def test_default_is_at_most_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert 1 <= default_num_threads() <= len(os.sched_getaffinity(0))


def test_omp_num_threads_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_num_threads() == 3


def test_cap_lowers_an_oversubscribed_count_and_keeps_a_lower_one(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert cap_cpu_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        torch.set_num_threads(1)
        assert cap_cpu_threads() == 1  # a user's lower count stays
    finally:
        torch.set_num_threads(before)
