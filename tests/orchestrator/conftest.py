"""Shared fixtures: the real Loom tokenizer (with its chat template), real tools, and a real
FAISS + BM25 index (MiniLM) over three small asyncio documents."""

from __future__ import annotations

import pytest

from tests.orchestrator.sample_tools import add, explode, hang, slow_echo
from tests.retrieval.helpers import index_of


@pytest.fixture(scope="session")
def tokenizer():
    from loom.runtime.checkpoint import build_tokenizer

    return build_tokenizer()


@pytest.fixture
def tool_set():
    return [add, slow_echo, explode, hang]


DOCS = {
    "tasks.md": "# Tasks\n\nA task wraps a coroutine and schedules it on the event loop. "
                "Use asyncio.create_task to run coroutines concurrently.\n\n## Cancellation\n\n"
                "Calling cancel() on a task raises CancelledError inside the coroutine.",
    "queues.md": "# Queues\n\nasyncio.Queue is a FIFO queue for producer and consumer coroutines. "
                 "put() waits when the queue is full and get() waits when it is empty.",
    "locks.md": "# Locks\n\nasyncio.Lock guarantees exclusive access to a shared resource. "
                "Use it with async with lock: to acquire and release it.",
}


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    return index_of(tmp_path_factory, DOCS)
