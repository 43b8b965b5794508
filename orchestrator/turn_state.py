"""``TurnState``: what the hooks around a turn (compaction, memory) read and write of the running turn.

:class:`loom.orchestrator.runner.TurnRunner` satisfies it.  The hooks name this
Protocol instead of importing the runner, so the runner imports the hooks and
never the other way round (one arrow, no circle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from loom.orchestrator.events import RunResult, ToolChoice
from loom.orchestrator.items import Item
from loom.orchestrator.ledger import Ledger
from loom.orchestrator.parts import AgentParts
from loom.orchestrator.session import Session

T = TypeVar("T")


class TurnState(Protocol):
    """One user turn in progress.

    Attributes:
        parts: the agent's engine, tools, budget and other parts.
        session: where the turn's items are stored.
        items: the session's items, this turn's included (the append-only log).
        turn: this turn's number (1 for a session's first turn).
        message: the user's message of this turn.
        choice: the turn's ``tool_choice``.
        result: what the turn has produced so far.
        ledgers: one token-class ledger per model call made so far.
    """

    parts: AgentParts
    session: Session
    items: list[Item]
    turn: int
    message: str
    choice: ToolChoice
    result: RunResult
    ledgers: list[Ledger]

    def _store(self, new: list[Item]) -> None: ...

    def _retention_key(self) -> str: ...

    async def _timed(self, key: str, fn: Callable[..., T], *args: Any) -> T: ...
