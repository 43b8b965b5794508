"""Loom orchestrator: KV-cache-aware context assembly, the agent loop and the token-class ledger.

- :class:`ContextBuilder` assembles prompts from stored token ids in the order
  of ARCHITECTURE.md, under a :class:`ContextBudget`;
- :class:`Agent` runs the reasoning / tool-call loop (``run``, ``arun``, ``stream``);
- :mod:`orchestrator.ledger` splits tokens, time and cost by class;
- :mod:`orchestrator.parsers` splits streamed text into reasoning, content and tool calls;
- sessions: :class:`InMemorySession`, :class:`SQLSession`.
"""

from orchestrator.agent import Agent
from orchestrator.budget import ContextBudget
from orchestrator.context import Context, ContextBuilder, Segment
from orchestrator.events import RunResult
from orchestrator.ledger import Ledger, PriceTable
from orchestrator.parsers import StreamingParser
from orchestrator.session import InMemorySession, Session, SQLSession

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
