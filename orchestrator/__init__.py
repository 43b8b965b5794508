"""Loom orchestrator: KV-cache-aware context assembly, the agent loop and the token-class ledger.

- :class:`ContextBuilder` assembles prompts from stored token ids, ordered by how often
  each part changes, under a :class:`ContextBudget`;
- :class:`Agent` runs the reasoning / tool-call loop (``run``, ``arun``, ``stream``);
- :mod:`loom.orchestrator.ledger` splits tokens, time and cost by class;
- :mod:`loom.orchestrator.parsers` splits streamed text into reasoning, content and tool calls;
- sessions: :class:`InMemorySession`, :class:`SQLSession`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from loom.orchestrator.agent import Agent
    from loom.orchestrator.budget import ContextBudget
    from loom.orchestrator.context import Context, ContextBuilder, Segment
    from loom.orchestrator.events import RunResult
    from loom.orchestrator.ledger import Ledger, PriceTable
    from loom.orchestrator.parsers import StreamingParser
    from loom.orchestrator.session import InMemorySession, Session, SQLSession

# Imported lazily, so that a light module (``loom.orchestrator.ledger``, ``.relevance``) does not load
# the agent loop and with it torch: ``loom eval report`` reads records with no model in sight.
_EXPORTS = {
    "Agent": "loom.orchestrator.agent",
    "ContextBudget": "loom.orchestrator.budget",
    "Context": "loom.orchestrator.context",
    "ContextBuilder": "loom.orchestrator.context",
    "Segment": "loom.orchestrator.context",
    "RunResult": "loom.orchestrator.events",
    "Ledger": "loom.orchestrator.ledger",
    "PriceTable": "loom.orchestrator.ledger",
    "StreamingParser": "loom.orchestrator.parsers",
    "InMemorySession": "loom.orchestrator.session",
    "Session": "loom.orchestrator.session",
    "SQLSession": "loom.orchestrator.session",
}

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


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loom.orchestrator' has no attribute {name!r}")
