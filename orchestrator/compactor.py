"""When a turn compacts its view, and the compaction prepared after a turn.

Owner of the compaction *decisions* of a running turn (the planning of what
to hide lives in :mod:`orchestrator.compaction`, the summary call in
:mod:`orchestrator.summarize`).  :class:`~orchestrator.runner.TurnRunner`
calls :func:`before_call` before each model call; :class:`~orchestrator.agent.Agent`
calls :func:`after_turn` once a turn has finished.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orchestrator import compaction as comp
from orchestrator.summarize import summarize_items

if TYPE_CHECKING:
    from orchestrator.runner import TurnRunner

logger = logging.getLogger(__name__)


async def before_call(runner: TurnRunner) -> None:
    """Compact the view of ``runner``'s session when the next prompt needs it (appends a marker)."""
    a = runner.parts
    groups = a.builder.plan_compaction(runner.items, runner.turn)
    if not groups:
        return
    summary = None
    if a.budget.compaction == "summarize":
        hidden = [runner.items[i] for g in groups for i in g]
        text, led = await summarize_items(a, runner.items, hidden, runner.turn)
        runner.ledgers.append(led)
        summary = a.builder.summary_item(runner.items, runner.turn, text)
    runner._store([comp.marker(runner.turn, groups, summary)])
    runner.result.compactions += 1
    logger.info("compacted session view at turn %d: hid %d items", runner.turn, sum(map(len, groups)))


async def after_turn(runner: TurnRunner) -> Any:
    """Work done once a turn has finished, off the user's critical path (nothing yet)."""
    return None
