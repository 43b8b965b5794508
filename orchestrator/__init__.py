"""Loom orchestrator: KV-cache-aware context assembly, the agent loop and the token-class ledger.

- :class:`ContextBuilder` assembles prompts from stored token ids, ordered by how often
  each part changes, under a :class:`ContextBudget`;
- :class:`Agent` runs the reasoning / tool-call loop (``run``, ``arun``, ``stream``);
- :mod:`loom.orchestrator.ledger` splits tokens, time and cost by class;
- :mod:`loom.orchestrator.parsers` splits streamed text into reasoning, content and tool calls;
- sessions: :class:`InMemorySession`, :class:`SQLSession`.
"""

from loom.orchestrator.agent import Agent
from loom.orchestrator.budget import ContextBudget
from loom.orchestrator.context import Context, ContextBuilder, Segment
from loom.orchestrator.events import RunResult
from loom.orchestrator.ledger import Ledger, PriceTable
from loom.orchestrator.parsers import StreamingParser
from loom.orchestrator.session import InMemorySession, Session, SQLSession

__all__ = [
    "Agent",
    "Context",
    "ContextBudget",
    "ContextBuilder",
    "InMemorySession",
    "Ledger",
    "PriceTable",
    "RunResult",
    "SQLSession",
    "Segment",
    "Session",
    "StreamingParser",
]
