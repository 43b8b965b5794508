"""CPU thread default: physical cores available, never raising a count the user set; OpenMP workers let go."""

from __future__ import annotations

import os

import torch

from loom.runtime.threads import cap_cpu_threads, default_num_threads
from tests.openmp_probe import needs_two_cpus, run_probe


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



_WORKERS = r"""
from loom.runtime.threads import release_openmp_threads
before = tasks()
torch.ones(1 << 22).mul_(2.0)  # a parallel region: this thread's team gets a worker
with_worker = tasks()
released = release_openmp_threads()
print(before, with_worker, released, tasks())
"""


@needs_two_cpus
def test_release_lets_the_calling_threads_openmp_workers_go():
    before, with_worker, released, after = run_probe(_WORKERS)
    assert int(with_worker) == int(before) + 1
    assert released == "True" and int(after) == int(before)


_ENGINE = r"""
from loom.runtime.async_llm import AsyncLLM
torch.ones(1 << 22).mul_(2.0)  # the building thread has a worker
before = tasks()
engine = AsyncLLM(sys.argv[1], device="cpu", dtype="float32")  # loads here, steps on its own thread
print(before, tasks())  # the engine thread is new, the building thread's worker is gone
"""


@needs_two_cpus
def test_async_llm_on_cpu_leaves_its_engine_threads_openmp_team_the_only_one(tiny_checkpoint):
    before, after = run_probe(_ENGINE, str(tiny_checkpoint()))[-2:]
    assert int(after) == int(before)  # + the engine thread - the worker


_SYNC = r"""
from loom.runtime import LLM, SamplingParams
torch.ones(1 << 22).mul_(2.0)  # the building thread has a worker
before = tasks()
llm = LLM(sys.argv[1], device="cpu", dtype="float32")
loaded = tasks()
llm.generate(prompt_token_ids=[list(range(1, 40))], sampling_params=SamplingParams(max_tokens=8), use_tqdm=False)
print(before, loaded, tasks())
"""


@needs_two_cpus
def test_llm_on_cpu_lets_go_of_openmp_workers_after_loading_and_after_each_generate(tiny_checkpoint):
    # an Agent calls generate on a worker thread: the loading thread's workers would make its team wait
    before, loaded, generated = (int(n) for n in run_probe(_SYNC, str(tiny_checkpoint()))[-3:])
    assert loaded == before - 1 and generated == before - 1
