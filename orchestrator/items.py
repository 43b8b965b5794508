"""Session items: chat messages plus the exact tokens they occupy in the prompt.

An item is a JSON-serialisable dict (so any :class:`~orchestrator.session.Session`
can store it):

- ``kind``: ``memory_snapshot`` | ``memory`` | ``retrieval`` | ``user`` |
  ``assistant`` | ``tool_result`` | ``summary`` | ``compaction``;
- ``turn``: the user turn that produced it (1-based; the snapshot is turn 0);
- chat fields as the template wants them: ``role``, ``content`` and, for
  assistant items, ``reasoning_content`` and OpenAI-style ``tool_calls``; for
  tool results ``tool_call_id`` and ``name``;
- retrieval items keep ``sources``: the labels of the hits they show (for citations);
- ``token_ids``: the ids this item occupies in every prompt that shows it;
  assistant items store the generation prompt + the generated ids + the
  template's trailer; with reasoning, ``stripped_token_ids`` holds the
  rendering without it (used when ``keep_reasoning=False``);
- ``compaction`` items are not messages: ``hide`` lists ``[start, end)``
  ranges of item indices left out of the view from then on, ``summary`` an
  optional summary item shown in their place.
"""

from __future__ import annotations

import uuid

from typing import Any, Iterable

Item = dict[str, Any]

MESSAGE_KINDS = ("memory_snapshot", "memory", "retrieval", "user", "assistant", "tool_result", "summary")
_TAIL_CLASS = {"retrieval": "retrieval", "memory": "memory", "user": "user",
               "tool_result": "tool_result", "assistant": "history", "summary": "history"}


def is_message(item: Item) -> bool:
    """True for items that render into the prompt (everything but compaction markers)."""
    return item.get("kind") in MESSAGE_KINDS


def to_message(item: Item, keep_reasoning: bool = True) -> dict[str, Any]:
    """The chat-template message of an item."""
    msg: dict[str, Any] = {"role": item["role"], "content": item.get("content", "")}
    if item["role"] == "assistant":
        if keep_reasoning and item.get("reasoning_content"):
            msg["reasoning_content"] = item["reasoning_content"]
        if item.get("tool_calls"):
            msg["tool_calls"] = item["tool_calls"]
    elif item["role"] == "tool":
        msg["tool_call_id"] = item.get("tool_call_id", "")
        msg["name"] = item.get("name", "")
    return msg


def prompt_class(item: Item, current_turn: int) -> str:
    """Ledger class of an item's tokens in a prompt of ``current_turn``.

    The memory snapshot is always ``memory``; earlier turns are ``history``
    (their retrieved chunks and tool results included); this turn's items keep
    their own class (its assistant steps count as ``history``).
    """
    kind = item["kind"]
    if kind == "memory_snapshot":
        return "memory"
    if item.get("turn", 0) < current_turn:
        return "history"
    return _TAIL_CLASS[kind]


def message_item(kind: str, turn: int, role: str, content: str, token_ids: list[int], **extra: Any) -> Item:
    """A new message item (``extra``: reasoning_content, tool_calls, tool_call_id, name, ...)."""
    item: Item = {"kind": kind, "turn": turn, "role": role, "content": content, "token_ids": list(token_ids)}
    item.update({k: v for k, v in extra.items() if v is not None})
    return item


def format_retrieval(hits: Iterable[Any]) -> str:
    """The text of a retrieval message: one ``<document>`` block per hit, in rank order.

    Only stable fields (source, section, text) are shown: no scores or ids, so
    the same hit renders to the same tokens in every turn.
    """
    blocks = [f'<document source="{source_label(h)}">\n{h.text}\n</document>' for h in hits]
    return "Retrieved documents:\n" + "\n".join(blocks)


def source_label(hit: Any) -> str:
    """How a retrieval hit is named to the model: ``document - section`` (or the document alone);
    an API entry's section is its qualified name (metadata ``object``)."""
    source = getattr(hit, "document", "") or ""
    section = (getattr(hit, "metadata", None) or {}).get("object") or getattr(hit, "section", "") or ""
    return f"{source} - {section}" if section else source


def format_memory(memories: Iterable[Any], snapshot: bool) -> str:
    """The text of a memory message (the session's snapshot or this turn's new hits).

    ``memories``: strings or memory hits (``.text``).
    """
    head = "Long-term memory about the user:" if snapshot else "Relevant memories:"
    texts = [m if isinstance(m, str) else m.text for m in memories]
    return head + "\n" + "\n".join(f"- {t}" for t in texts)


def new_tool_call_id() -> str:
    """A fresh tool-call id, ``call_<24 hex>`` (OpenAI's shape; unique across sessions and servers).

    Ids are never rendered into the prompt, so a random one costs the prefix
    cache nothing.
    """
    return f"call_{uuid.uuid4().hex[:24]}"
