"""The retrieval message's format and its passages (``loom.orchestrator.items``)."""

from __future__ import annotations

from loom.orchestrator.items import format_retrieval, retrieval_passages
from loom.orchestrator.relevance import NO_MATCH
from loom.retrieval.types import Hit


def test_a_retrieval_message_splits_into_its_passages_each_with_its_source():
    hits = [Hit("c1", "Calling cancel() raises CancelledError.", 1.0, "tasks.md", "Tasks > Cancellation"),
            Hit("c2", "put() waits when the queue is full.", 0.5, "queues.md", "Queues")]
    passages = retrieval_passages(format_retrieval(hits))
    assert passages == ['<document source="tasks.md - Tasks > Cancellation">\nCalling cancel() raises '
                        'CancelledError.\n</document>',
                        '<document source="queues.md - Queues">\nput() waits when the queue is full.\n</document>']
    assert retrieval_passages(NO_MATCH) == [NO_MATCH]  # a note that nothing was related is one text
