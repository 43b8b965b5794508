"""Forking a session: a new conversation that starts as a copy of another up to a point.

As LangGraph's checkpoint forking (``update_state`` on a past checkpoint, then
run from there), a session can be continued from any earlier point while the
original goes on untouched.  The fork point is either

* ``at``: a number of items, i.e. the fork holds ``items[:at]`` (items as
  :meth:`Session.get_items` returns them), or
* ``turn``: "after turn N", i.e. every item of turns ``0..N`` (turn 0 is the
  memory snapshot), including compaction markers made after turn N finished.

A point that would separate an assistant reply's tool calls from their results
is refused (:class:`~loom.runtime.errors.InvalidRequestError` naming ``at``): the
prompt never shows a call without its result.  Compaction markers before the
point are kept (their ``hide`` ranges index earlier items only), later ones
are dropped with the items they belong to.

The fork's items are the parent's stored items, token ids included, so the
fork's first prompt starts with exactly the tokens the parent's prompts
started with: the engine's prefix cache serves everything before the fork
point (measured in ``tests/api/test_session_fork.py``).
"""

from __future__ import annotations

from loom.orchestrator.items import Item
from loom.runtime.errors import InvalidRequestError

__all__ = ["fork_point"]


def fork_point(items: list[Item], at: int | None = None, turn: int | None = None) -> int:
    """How many leading items a fork keeps (``len(items)`` when neither is given).

    Raises:
        InvalidRequestError: both or a bad ``at`` / ``turn``, or a point inside a tool step
            (naming the field).
    """
    if at is not None and turn is not None:
        raise InvalidRequestError("at: give either at (items) or turn, not both", param="at")
    field = "at" if turn is None else "turn"
    if turn is not None:
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
            raise InvalidRequestError(f"turn: must be an int >= 0, got {turn!r}", param="turn")
        last = max((it.get("turn", 0) for it in items), default=0)
        if turn > last:
            raise InvalidRequestError(f"turn: the session has {last} turn(s), got {turn}", param="turn")
        at = next((i for i, it in enumerate(items) if it.get("turn", 0) > turn), len(items))
    elif at is None:
        at = len(items)
    elif isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= len(items):
        raise InvalidRequestError(f"at: must be an int in [0, {len(items)}] (items to keep), got {at!r}",
                                  param="at")
    if 0 < at < len(items):
        before, after = items[at - 1], items[at]
        if after.get("kind") == "tool_result" or (before.get("kind") == "assistant" and before.get("tool_calls")):
            raise InvalidRequestError(f"{field}: item {at} is inside a tool step (a tool call and its results "
                                      "stay together); fork before the call or after its results", param=field)
    return at
