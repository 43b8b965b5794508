"""Compaction of the *view* of a session: which stored items the prompt shows.

The stored log is append-only.  Compaction appends a marker item
``{"kind": "compaction", "turn": t, "hide": [[start, end), ...], "summary": item | None}``
(optionally ``"after_turn": True`` when it was made after turn ``t`` finished,
see :func:`rebuilt`); the view is every message item minus the union of all
markers' hidden ranges, with the newest marker's summary (if any) shown right
after the memory snapshot.  Because the markers stay in the log, every later
prompt is built from the same view and keeps hitting the prefix cache.

What is hidden first (the retention policy, :func:`plan`), oldest first, and
only until the history is down to the low-water mark:

1. *documents*: the retrieved chunks and the tool steps (an assistant tool
   call together with all its results, never one without the other) of
   earlier turns older than the newest ``keep_turns`` earlier turns; then,
   if that is not enough, those of the kept turns but the newest one (the
   dialogue matters more to a follow-up than an older turn's chunks).
   The dialogue (user messages and final answers) stays;
2. *whole earlier turns* (their dialogue with them), when hiding documents
   is not enough; summarised when ``ContextBudget.compaction == "summarize"``;
3. this turn's oldest tool steps, only when the current turn alone does not fit.

Retrieved chunks are ~90% of a retrieval-heavy session's tokens, so step 1
frees most of the window while the conversation stays readable; one big step
down to the low-water mark keeps compactions rare (each one moves the prompt
at its first hidden item, so everything after it is prefilled again once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loom.orchestrator.items import Item, is_message

__all__ = ["Plan", "View", "compute_view", "hide_ranges", "marker", "plan", "plan_drop", "rebuilt"]


@dataclass
class View:
    """Visible items of a session, by index into the stored item list."""

    snapshot: list[int] = field(default_factory=list)
    summary: Item | None = None
    history: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    hidden: set[int] = field(default_factory=set)


def compute_view(items: list[Item], turn: int) -> View:
    """Split the visible items into snapshot / history (earlier turns) / tail (this turn).

    An earlier turn answered ``no_match_answer`` (its reply item has ``"no_match": True``, written by the
    runner) is in none of them: the session keeps it, later prompts do not show it.  A small model shown
    "The indexed documents do not cover this." in its history answers that to what follows: over Click's
    docs, after one refused question, Qwen2.5-Coder-0.5B refused all 7 turns that followed (sums and a
    how-to question included); with refused turns left out it computed 3 of its 4 sums and answered the
    how-to.  Leaving a turn out of the end of the history keeps every earlier prefix, so the prefix cache
    still serves it."""
    view = View()
    refused = {item.get("turn") for item in items if item.get("no_match")}
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
            if item.get("turn") not in refused:
                view.history.append(i)
        else:
            view.tail.append(i)
    return view


@dataclass
class Plan:
    """What one compaction hides (lists of item-index groups, each hidden whole).

    Attributes:
        docs: earlier turns' retrieval items and tool steps (the dialogue stays).
        turns: whole earlier turns (what a summary replaces).
        steps: this turn's oldest tool steps.
    """

    docs: list[list[int]] = field(default_factory=list)
    turns: list[list[int]] = field(default_factory=list)
    steps: list[list[int]] = field(default_factory=list)

    @property
    def groups(self) -> list[list[int]]:
        return self.docs + self.turns + self.steps


def rebuilt(items: list[Item]) -> set[int]:
    """Indices of items that a later compaction marker re-prefilled (so their rendering may change).

    A marker moves the prompt at its first hidden item (at the summary's place,
    right after the snapshot, when it shows a new summary): every item stored
    before the marker and shown after that point is prefilled again by the
    next call anyway, so it may switch to its cheaper rendering there
    (``stripped_token_ids``: an earlier reply without its reasoning) at no
    cache cost.  A marker made inside turn ``t`` covers items of turns before
    ``t``; one made after turn ``t`` finished (``"after_turn": True``) covers
    turn ``t`` too.  Items before the cut keep the ids they were first shown
    with, so the cached prefix up to the cut stays valid.
    """
    out: set[int] = set()
    for m, mk in enumerate(items):
        if mk.get("kind") != "compaction":
            continue
        starts = [s for s, _e in mk.get("hide", [])]
        cut = -1 if mk.get("summary") is not None else min(starts, default=m)
        last_turn = mk.get("turn", 0) if mk.get("after_turn") else mk.get("turn", 0) - 1
        out.update(i for i in range(cut + 1, m) if is_message(items[i]) and items[i].get("turn", 0) <= last_turn)
    return out


def _turn_groups(items: list[Item], indices: list[int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i in indices:
        if groups and items[groups[-1][-1]].get("turn") == items[i].get("turn"):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _step_groups(items: list[Item], indices: list[int]) -> list[list[int]]:
    """Assistant tool steps, each with the tool results that follow it (final answers excluded)."""
    groups: list[list[int]] = []
    for i in indices:
        kind = items[i]["kind"]
        if kind == "assistant":
            groups.append([i])
        elif kind == "tool_result" and groups:
            groups[-1].append(i)
    return [g for g in groups if len(g) > 1 or items[g[0]].get("tool_calls")]


def _doc_groups(items: list[Item], turn_group: list[int]) -> list[list[int]]:
    """One earlier turn's documents: each retrieval item alone, each tool step whole."""
    docs = [[i] for i in turn_group if items[i]["kind"] == "retrieval"]
    return docs + _step_groups(items, turn_group)


def plan(items: list[Item], view: View, sizes: dict[int, int], history_cap: int, low_water: float,
         over_by: int, reserve: int = 0, keep_turns: int | None = None) -> Plan | None:
    """What to hide, or ``None`` when nothing needs hiding.

    Args:
        sizes: tokens of each visible item (index -> tokens).
        history_cap: the history's cap (tokens).
        low_water: hide until the history is at most ``low_water * history_cap``.
        over_by: tokens by which the whole prompt exceeds its limit (<= 0: fits).
        reserve: tokens a summary will add (subtracted from the target when whole turns go).
        keep_turns: documents of the newest ``keep_turns`` earlier turns are hidden
            only after all older ones; the newest earlier turn's only with whole
            turns (``None``: the old policy, whole turns only).

    Returns:
        documents of older turns first (oldest first), then whole earlier turns
        (oldest first), then, if the prompt still does not fit, this turn's
        oldest tool steps.
    """
    history = sum(sizes[i] for i in view.history)
    if history <= history_cap and over_by <= 0:
        return None
    target = int(low_water * history_cap)
    turns = _turn_groups(items, view.history)
    out = Plan()

    def take(into: list[list[int]], group: list[int]) -> None:
        nonlocal history, over_by
        freed = sum(sizes[i] for i in group)
        history -= freed
        over_by -= freed
        into.append(group)

    if keep_turns is not None:  # older turns' documents, then the kept ones but the newest turn's
        for tg in turns[: max(0, len(turns) - keep_turns)] + turns[max(0, len(turns) - keep_turns): -1]:
            for group in _doc_groups(items, tg):
                if history <= target and over_by <= 0:
                    break
                take(out.docs, group)
    hidden = {i for g in out.docs for i in g}
    for tg in turns:
        if history <= max(0, target - reserve) and over_by <= 0:
            break
        rest = [i for i in tg if i not in hidden]
        if rest:
            take(out.turns, rest)
    steps = _step_groups(items, view.tail)
    for group in steps[:-1] if steps and items[view.tail[-1]]["kind"] == "tool_result" else steps:
        if over_by <= 0:
            break
        take(out.steps, group)
    return out


def plan_drop(items: list[Item], view: View, sizes: dict[int, int], history_cap: int,
              low_water: float, over_by: int, reserve: int = 0) -> list[list[int]] | None:
    """Whole earlier turns, then this turn's oldest tool steps (the policy without retention)."""
    out = plan(items, view, sizes, history_cap, low_water, over_by, reserve)
    return None if out is None else out.groups


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


def marker(turn: int, groups: list[list[int]], summary: Item | None = None,
           after_turn: bool = False) -> Item:
    """The compaction marker item to append to the session (``after_turn``: made once turn ``turn`` ended)."""
    mk: Item = {"kind": "compaction", "turn": turn, "hide": hide_ranges(groups), "summary": summary}
    if after_turn:
        mk["after_turn"] = True
    return mk
