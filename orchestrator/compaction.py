"""Compaction of the *view* of a session: which stored items the prompt shows.

The stored log is append-only.  Compaction appends a marker item
``{"kind": "compaction", "hide": [[start, end), ...], "summary": item | None}``;
the view is every message item minus the union of all markers' hidden ranges,
with the newest marker's summary (if any) shown right after the memory
snapshot.  Because the markers stay in the log, every later prompt is built
from the same view and keeps hitting the prefix cache.

Cut points are whole turns (oldest first), so an assistant tool call is
never separated from its tool results; only when the current turn alone does
not fit are its oldest steps (an assistant reply together with all the tool
results that answer it) hidden.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.items import Item, is_message

__all__ = ["View", "compute_view", "last_compaction_turn", "plan_drop"]


@dataclass
class View:
    """Visible items of a session, by index into the stored item list."""

    snapshot: list[int] = field(default_factory=list)
    summary: Item | None = None
    history: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    hidden: set[int] = field(default_factory=set)


def compute_view(items: list[Item], turn: int) -> View:
    """Split the visible items into snapshot / history (earlier turns) / tail (this turn)."""
    view = View()
    for item in items:
        if item.get("kind") == "compaction":
            for start, end in item.get("hide", []):
                view.hidden.update(range(start, end))
            if item.get("summary") is not None:
                view.summary = item["summary"]
    for i, item in enumerate(items):
        if not is_message(item) or i in view.hidden:
            continue
        if item["kind"] == "memory_snapshot":
            view.snapshot.append(i)
        elif item.get("turn", 0) < turn:
            view.history.append(i)
        else:
            view.tail.append(i)
    return view


def last_compaction_turn(items: list[Item]) -> int:
    """The turn of the newest compaction marker (0 when the view was never compacted).

    Every item of an earlier turn still shown after that marker was prefilled
    again when it was made (the hidden turns were the oldest ones shown).
    """
    return max((it.get("turn", 0) for it in items if it.get("kind") == "compaction"), default=0)


def _turn_groups(items: list[Item], indices: list[int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i in indices:
        if groups and items[groups[-1][-1]].get("turn") == items[i].get("turn"):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _step_groups(items: list[Item], indices: list[int]) -> list[list[int]]:
    """This turn's assistant steps, each with the tool results that follow it."""
    groups: list[list[int]] = []
    for i in indices:
        kind = items[i]["kind"]
        if kind == "assistant":
            groups.append([i])
        elif kind == "tool_result" and groups:
            groups[-1].append(i)
    return groups


def plan_drop(items: list[Item], view: View, sizes: dict[int, int], history_cap: int,
              low_water: float, over_by: int, reserve: int = 0) -> list[list[int]] | None:
    """Item groups to hide, or ``None`` when nothing needs hiding.

    Args:
        sizes: tokens of each visible item (index -> tokens).
        history_cap: the history's cap (tokens).
        low_water: keep at most ``low_water * history_cap`` history tokens.
        over_by: tokens by which the whole prompt exceeds its limit (<= 0: fits).
        reserve: tokens a summary will add (subtracted from the target).

    Returns:
        Whole earlier turns first (oldest first); then, if the prompt still
        does not fit, this turn's oldest tool steps.
    """
    history = sum(sizes[i] for i in view.history)
    if history <= history_cap and over_by <= 0:
        return None
    target = max(0, int(low_water * history_cap) - reserve)
    drop: list[list[int]] = []
    for group in _turn_groups(items, view.history):
        if history <= target and over_by <= 0:
            break
        freed = sum(sizes[i] for i in group)
        history -= freed
        over_by -= freed
        drop.append(group)
    steps = _step_groups(items, view.tail)
    for group in steps[:-1] if steps and items[view.tail[-1]]["kind"] == "tool_result" else steps:
        if over_by <= 0:
            break
        over_by -= sum(sizes[i] for i in group)
        drop.append(group)
    return drop


def hide_ranges(groups: list[list[int]]) -> list[list[int]]:
    """``[start, end)`` ranges covering the indices of ``groups``, merged."""
    idx = sorted(i for g in groups for i in g)
    ranges: list[list[int]] = []
    for i in idx:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return ranges


def marker(turn: int, groups: list[list[int]], summary: Item | None = None) -> dict[str, Any]:
    """The compaction marker item to append to the session."""
    return {"kind": "compaction", "turn": turn, "hide": hide_ranges(groups), "summary": summary}
