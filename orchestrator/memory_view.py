"""Long-term memory as a turn sees it: write-back with provenance, and which memories stay shown.

Owner of the orchestrator's side of memory trust (the store's side is
:mod:`memory`).  :class:`~orchestrator.runner.TurnRunner` calls
:func:`stale_marker` when a turn starts, wraps tool calls in
:func:`tool_provenance`, and calls :func:`write_back` when a turn is done.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from orchestrator.items import Item

if TYPE_CHECKING:
    from orchestrator.runner import TurnRunner

logger = logging.getLogger(__name__)


def stale_marker(runner: TurnRunner) -> Item | None:
    """A marker item hiding shown memories that were since superseded or deleted (``None``: none)."""
    return None


@contextmanager
def tool_provenance(runner: TurnRunner) -> Iterator[None]:
    """Context in which this turn's tools run (so a memory they write records where it came from)."""
    yield


async def write_back(runner: TurnRunner) -> None:
    """Add the turn's user message to long-term memory (never fails the turn)."""
    a = runner.parts
    try:
        await runner._timed("memory", a.memory.add, [{"role": "user", "content": runner.message}],
                            a.memory_namespace, "user")
    except Exception:  # noqa: BLE001 - write-back must not fail the turn
        logger.warning("memory write-back failed", exc_info=True)
