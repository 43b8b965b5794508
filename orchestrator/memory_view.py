"""Long-term memory as a turn sees it: provenance of writes, and which memories stay shown.

Owner of the orchestrator's side of memory trust (the store's side is
:mod:`memory`, its rules :mod:`loom.memory.trust`).  :class:`~loom.orchestrator.runner.TurnRunner`
calls :func:`stale_marker` when a turn starts, wraps tool calls in
:func:`tool_provenance`, and calls :func:`write_back` when a turn is done.

Trust rule for the ``remember`` tool (the model writes what its context told it):

* The *visible context* of a tool call is every item the prompt showed
  (``compaction_plan.compute_view``: the snapshot, earlier turns, this turn), plus a
  summary of hidden items.  If it holds a retrieved document (``retrieval``
  item) the call has provenance ``document``; else if it holds a tool result
  (``tool_result`` item) ``tool``.  Both are untrusted: ``memory.add`` quarantines
  the fact.  Earlier turns count too: a document shown three turns ago can
  still steer this call.
* Exception: a fact made only of the user's own words (``loom.memory.trust.in_user_words``
  over the visible user messages: every content word and number occurs there)
  has provenance ``user``: whatever steered the call, the user said it.
* With neither in view, provenance is ``assistant`` (trusted: the model saw only
  the user, the system prompt and trusted memories).

Stale memories: a memory shown in an earlier turn's ``memory_snapshot`` / ``memory``
item (its ``memory_ids``) that was since superseded, deleted or quarantined must
not stay in later prompts.  The log is append-only, so :func:`stale_marker`
appends a compaction marker hiding those items and, when some of the memories
they showed are still active, a new ``memory_snapshot`` with them
(``compute_view`` shows snapshot items first, in index order).  The view then
changes right after the header: that one turn is a prefix-cache miss, the
price of not showing a fact the user withdrew.

Write-back: the user's message goes through the memory's extractor (rules,
``memory.RuleBasedExtractor``) with provenance ``user``.  When the rules find
nothing but the message has memory cues ("forget ...", "... anymore", "I
changed jobs", ``loom.memory.extractors.needs_model``), the agent's own model is asked
for ``{"facts", "forget"}`` under a JSON-schema constraint (mem0's approach);
its facts are kept only when made of the user's words (provenance ``extractor``),
its forget requests only when they share a content word with the message.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from loom.json_types import JSONObject
from loom.memory.extractors import FACTS_PROMPT, needs_model, parse_facts
from loom.memory.extractors import facts_schema as _facts_schema
from loom.memory.text import content_tokens
from loom.memory.trust import in_user_words
from loom.memory.types import ForgetRequest
from loom.orchestrator.compaction_plan import compute_view, hide_ranges
from loom.orchestrator.items import Item
from loom.orchestrator.template import prompt_ids
from loom.orchestrator.turn_state import TurnState
from loom.runtime.sampling_params import SamplingParams
from loom.runtime.structured_output import StructuredOutputParams
from loom.tools.builtin.memory import memory_provenance

logger = logging.getLogger(__name__)

MEMORY_KINDS = ("memory_snapshot", "memory")
EXTRACT_MAX_FACTS = 4
EXTRACT_MAX_TOKENS = 160  # enough for 4 short facts in the schema's JSON




def _session_id(runner: TurnState) -> str | None:
    return getattr(runner.session, "session_id", None)


def _visible(runner: TurnState) -> tuple[list[Item], list[Item]]:
    """``(visible items, hidden items)`` of the session as the prompt shows it now."""
    view = compute_view(runner.items, runner.turn)
    shown = sorted(view.snapshot + view.history + view.tail)
    hidden = [runner.items[i] for i in sorted(view.hidden) if i < len(runner.items)]
    visible = [runner.items[i] for i in shown]
    if view.summary is not None:
        visible.append(view.summary)
        # A summary is the model's restatement of what it hides, documents included.
        visible.extend(it for it in hidden if it.get("kind") in ("retrieval", "tool_result"))
    return visible, hidden


def provenance_for(runner: TurnState) -> Callable[[str], JSONObject]:
    """``fact -> source`` of a ``remember`` call made now (the rule in the module docstring)."""
    visible, _ = _visible(runner)
    base = {"session_id": _session_id(runner), "turn": runner.turn}
    docs = [s for it in visible if it.get("kind") == "retrieval" for s in it.get("sources") or []]
    tools = [it.get("name") or "" for it in visible if it.get("kind") == "tool_result" and it.get("role") == "tool"]
    taint = "document" if any(it.get("kind") == "retrieval" for it in visible) else "tool" if tools else None
    detail = ("documents: " + ", ".join(dict.fromkeys(docs))) if taint == "document" else (
        "tools: " + ", ".join(dict.fromkeys(tools)) if taint == "tool" else None)
    user_texts = [it.get("content") or "" for it in visible if it.get("kind") == "user"] + [runner.message]

    def provenance(fact: str) -> JSONObject:
        if taint is None:
            return {"kind": "assistant", **base}
        if in_user_words(fact, user_texts):
            return {"kind": "user", **base}
        return {"kind": taint, "detail": detail, **base}

    return provenance


@contextmanager
def tool_provenance(runner: TurnState) -> Iterator[None]:
    """Context in which this turn's tools run: ``remember`` records where its fact came from.

    Sets a ``ContextVar`` (``loom.tools.builtin.memory.memory_provenance``) that the
    ``asyncio.gather`` tasks and tool threads of the block copy.
    """
    with memory_provenance(provenance_for(runner)):
        yield


def stale_marker(runner: TurnState) -> None:
    """Hide shown memories that were superseded, deleted or quarantined since (see module docstring).

    Stores, through ``runner._store``, a compaction marker (``hide``: the stale
    items' ``[start, end)`` ranges, ``summary: None``) and, when some of their
    memories are still active, a replacement ``memory_snapshot``.  Returns ``None``
    (nothing for the runner to store); never raises (a failed check shows the
    memories as before).
    """
    mem = runner.parts.memory
    get_many = getattr(mem, "get_many", None)
    if mem is None or get_many is None or not runner.items:
        return None
    try:
        view = compute_view(runner.items, runner.turn)
        shown = {i: [m for m in runner.items[i].get("memory_ids") or [] if m is not None]
                 for i in sorted(view.snapshot + view.history + view.tail)
                 if runner.items[i].get("kind") in MEMORY_KINDS}
        ids = list(dict.fromkeys(m for ms in shown.values() for m in ms))
        if not ids:
            return None
        ns = runner.parts.memory_namespace
        live = {m.id: m for m in get_many(ids, ns) if m.active}
        # Same id, other text: a store created before ids were never reused (SQLite
        # rowids) gave a deleted memory's id to a new one.
        stale = [i for i, ms in shown.items()
                 if any(m not in live or json.dumps(live[m].text, ensure_ascii=False)
                        not in (runner.items[i].get("content") or "") for m in ms)]
        if not stale:
            return None
        keep = [live[m] for m in dict.fromkeys(m for i in stale for m in shown[i]) if m in live]
        new: list[Item] = [{"kind": "compaction", "turn": runner.turn, "hide": hide_ranges([[i] for i in stale]),
                            "summary": None}]
        if keep:
            snap = runner.parts.builder.snapshot_item([], keep)
            if snap is not None:
                new.append(snap)
        logger.info("memory: hiding %d stale memory item(s) of session %s", len(stale), _session_id(runner))
        runner._store(new)
    except Exception:  # noqa: BLE001 - a failed check must not fail the turn
        logger.warning("memory: stale-memory check failed", exc_info=True)
    return None


async def write_back(runner: TurnState) -> list[Any]:
    """Add the turn's user message to long-term memory; the store's events (never fails the turn)."""
    memory = runner.parts.memory
    if memory is None:
        return []
    source = {"kind": "user", "session_id": _session_id(runner), "turn": runner.turn}
    namespace = runner.parts.memory_namespace
    events: list[Any] = []
    try:
        events = list(await runner._timed("memory", memory.add, [{"role": "user", "content": runner.message}],
                                          namespace, source))
        if not events and getattr(memory, "model_extraction", False) and needs_model(runner.message):
            for fact in await model_facts(runner):
                events += await runner._timed("memory", memory.add, fact, namespace,
                                              {**source, "kind": "extractor"})
    except Exception:  # noqa: BLE001 - write-back must not fail the turn
        logger.warning("memory write-back failed", exc_info=True)
    if events:
        logger.debug("memory write-back: %s", [(getattr(e.event, "value", e.event), e.id, e.reason) for e in events])
    return events


async def model_facts(runner: TurnState) -> list[str]:
    """Facts and forget requests the agent's model reads in the user's message, screened.

    One constrained call (``loom.memory.extractors.facts_schema``, greedy).  A fact is
    kept only when made of the user's words; a forget request only when it shares
    a content word with the message (a small model's invention is dropped).
    """
    b = runner.parts.builder
    prompt = FACTS_PROMPT.format(conversation=f"user: {runner.message.strip()}")
    ids = prompt_ids(b.renderer.tokenizer, b.fmt, [{"role": "user", "content": prompt}], None)
    sp = SamplingParams(temperature=0.0, max_tokens=EXTRACT_MAX_TOKENS, skip_special_tokens=True,
                        structured_output=StructuredOutputParams(json=_facts_schema(EXTRACT_MAX_FACTS)))
    text = ""
    async for out in runner.parts.engine.stream(ids, sp, f"memory-extract-{uuid.uuid4().hex[:12]}"):
        text += out.new_text
    try:
        facts = parse_facts(text)
    except ValueError as exc:
        logger.info("memory extractor: unusable model output (%s)", exc)
        return []
    words = content_tokens(runner.message)
    new = [f for f in facts if not isinstance(f, ForgetRequest) and in_user_words(f, [runner.message])]
    gone = [f for f in facts if isinstance(f, ForgetRequest) and content_tokens(f) & words
            and content_tokens(f) not in {content_tokens(n) for n in new}]  # never forget what it just stated
    kept = new + gone
    logger.debug("memory extractor: model %r -> kept %r", facts, kept)
    return kept
