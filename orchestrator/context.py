"""``ContextBuilder``: the prompt as ordered segments with token classes and exact spans.

Order, by how often each part changes, so every call's
prompt starts with the previous call's prompt:

1. template header + system prompt + tool schemas (canonical, sorted by name);
2. the memory snapshot taken when the session started;
3. the append-only history, earlier turns' retrieved chunks and tool results
   exactly as first shown (their stored token ids);
4. this turn's retrieved chunks, new memory hits, the user message, then this
   turn's tool steps, and the generation prompt.

Nothing per-turn goes into the system message; no timestamps or ids are
rendered.  Token ids come from the stored items (see :mod:`loom.orchestrator.items`)
and from :class:`~loom.orchestrator.template.TemplateRenderer` for new ones, so a
:class:`Context` is assembled, never re-rendered.  The builder also makes the
new items of a turn (rendered once, stored with their ids) and checks the
budget; compaction is planned by :mod:`loom.orchestrator.compaction_plan`.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from loom.json_types import JSONObject
from loom.runtime.errors import ContextLengthError

from loom.orchestrator import compaction_plan as comp
from loom.orchestrator.budget import ContextBudget
from loom.orchestrator.events import ToolResultRecord
from loom.orchestrator.formats import ToolCallFormat
from loom.orchestrator.items import (
    Item,
    RetrievalCut,
    format_memory,
    format_retrieval,
    is_message,
    message_item,
    prompt_class,
    source_label,
    to_message,
)
from loom.orchestrator.protocols import MemoryHit, SearchHit, Tokenizer
from loom.orchestrator.relevance import NO_MATCH, split_relevant
from loom.orchestrator.template import TemplateRenderer


@dataclass
class Segment:
    """A run of prompt tokens of one class: ``token_ids[start:end]`` (tokens)."""

    cls: str
    start: int
    end: int
    item_index: int | None = None


@dataclass
class Context:
    """One assembled prompt.

    Attributes:
        token_ids: the prompt (list of int token ids).
        segments: ordered, contiguous, covering ``token_ids`` exactly once.
        history_tokens: tokens of earlier turns shown (incl. a summary).
        history_cap: the history cap this prompt was checked against.
        prompt_limit: window minus reserved output and reasoning tokens.
    """

    token_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    history_tokens: int = 0
    history_cap: int = 0
    prompt_limit: int = 0

    def spans(self) -> list[tuple[str, int, int]]:
        """``(class, start, end)`` with neighbouring segments of one class merged."""
        out: list[tuple[str, int, int]] = []
        for s in self.segments:
            if out and out[-1][0] == s.cls and out[-1][2] == s.start:
                out[-1] = (s.cls, out[-1][1], s.end)
            elif s.end > s.start:
                out.append((s.cls, s.start, s.end))
        return out

    def class_tokens(self) -> dict[str, int]:
        """Tokens per class."""
        counts: dict[str, int] = {}
        for s in self.segments:
            counts[s.cls] = counts.get(s.cls, 0) + s.end - s.start
        return counts


@dataclass
class RetrievalFit:
    """This turn's retrieval hits fitted to ``retrieval_cap`` (see :meth:`ContextBuilder.fit_retrieval`).

    Attributes:
        shown: hits shown to the model, in rank order (a truncated hit is a copy
            with its text cut at a sentence boundary and ``TRUNCATED_MARK`` appended).
        truncated: labels of hits shown cut.
        dropped: labels of hits left out whole.
        cut_tokens: tokens of hit text left out of the prompt (both kinds).
        below_cutoff: labels of hits not shown as unrelated to the message
            (under the agent's ``similarity_cutoff``, :mod:`loom.orchestrator.relevance`).
    """

    shown: list[SearchHit] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    cut_tokens: int = 0
    below_cutoff: list[str] = field(default_factory=list)

    @property
    def no_match(self) -> bool:
        """A search found hits and none was related to the message."""
        return not self.shown and bool(self.below_cutoff)

    def record(self) -> RetrievalCut | None:
        """JSON record stored on the retrieval item (``None`` when nothing was cut)."""
        if not self.truncated and not self.dropped and not self.below_cutoff:
            return None
        out: RetrievalCut = {"truncated": self.truncated, "dropped": self.dropped, "tokens": self.cut_tokens}
        if self.below_cutoff:
            out["below_cutoff"] = self.below_cutoff
        return out


TRUNCATED_MARK = " [...]"
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+|\n+")


# The user-role message after the last tool results of a turn (``ContextBuilder.tool_items``).
ANSWER_REQUEST = "Answer my question with that result, in one sentence."


class ContextBuilder:
    """Builds prompts for one agent (system prompt + tools) over session items.

    Args:
        tokenizer: the engine's HF tokenizer (with its chat template).
        system_prompt: system message text; ``None`` renders no system message
            (the template may still render a system turn for the tools).
        tools: OpenAI-style tool dicts, sorted by name (``ToolRegistry.schemas()``).
        budget: a :class:`ContextBudget` with ``max_model_len`` set.
        keep_reasoning: keep earlier turns' reasoning when a compaction rebuilds the
            view (else their stripped ids from then on; see :meth:`item_ids`).
        fmt: the model's tool-call format (detected from the tokenizer when ``None``).
    """

    def __init__(self, tokenizer: Tokenizer, system_prompt: str | None = "", tools: list[JSONObject] | None = None,
                 budget: ContextBudget | None = None, keep_reasoning: bool = True,
                 fmt: ToolCallFormat | None = None) -> None:
        self.renderer = TemplateRenderer(tokenizer, tools, fmt)
        self.fmt = self.renderer.fmt
        self.system_messages = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
        self.budget = budget or ContextBudget(max_model_len=4096)
        self.keep_reasoning = keep_reasoning
        self.header = self.renderer.header(system_prompt)
        self.gen_prompt_ids = self.renderer.generation_prompt(self.system_messages)
        self._overhead = len(self.renderer.append(self.system_messages, [{"role": "user", "content": ""}])[0])

    @property
    def header_ids(self) -> list[int]:
        return [t for _cls, ids in self.header for t in ids]

    def messages(self, items: Sequence[Item]) -> list[JSONObject]:
        """System message + every stored message item (the diff base for new items)."""
        return self.system_messages + [to_message(it) for it in items if is_message(it)]

    def count_message_tokens(self, content: str) -> int:
        """Tokens a user-role message with ``content`` takes (template overhead included)."""
        return len(self.renderer.encode(content)) + self._overhead

    # -- new items -------------------------------------------------------
    def render_items(self, items: Sequence[Item], new: list[Item]) -> list[Item]:
        """Fill ``token_ids`` of ``new`` items (rendered as one group after ``items``)."""
        pieces = self.renderer.append(self.messages(items), [to_message(it) for it in new])
        for item, ids in zip(new, pieces):
            item["token_ids"] = ids
        return new

    def snapshot_item(self, items: Sequence[Item], memories: Sequence[str | MemoryHit]) -> Item | None:
        """The session's memory snapshot (turn 0), capped to ``memory_cap``.

        ``memories``: strings or hits with ``.text`` (and ``.id``, stored as ``memory_ids``).
        """
        chosen = self.fit(list(memories), lambda ms: format_memory(ms, snapshot=True),
                          self.budget.memory_cap)
        if not chosen:
            return None
        item = message_item("memory_snapshot", 0, "user", format_memory(chosen, snapshot=True), [],
                            memory_ids=_ids(chosen))
        return self.render_items(items, [item])[0]

    def turn_items(self, items: Sequence[Item], turn: int, user_text: str,
                   hits: Sequence[SearchHit] | RetrievalFit = (),
                   memories: Sequence[str | MemoryHit] = ()) -> list[Item]:
        """This turn's retrieval message, new-memory message and user message, rendered.

        ``hits``: retrieval hits (``.text``, ``.document``, ``.section``), in rank
        order, fitted by :meth:`fit_retrieval` (the item's ``cut`` records what
        was left out); ``memories``: strings or memory hits (``.text``, ``.id``).
        """
        new: list[Item] = []
        fit = hits if isinstance(hits, RetrievalFit) else self.fit_retrieval(hits)
        if fit.shown:
            new.append(message_item("retrieval", turn, "user", format_retrieval(fit.shown), [],
                                    sources=[source_label(h) for h in fit.shown], cut=fit.record()))
        elif fit.no_match:
            new.append(message_item("retrieval", turn, "user", NO_MATCH, [], sources=[], cut=fit.record()))
        memories = self.fit(list(memories), lambda ms: format_memory(ms, snapshot=False),
                            self.budget.memory_cap)
        if memories:
            new.append(message_item("memory", turn, "user", format_memory(memories, snapshot=False), [],
                                    memory_ids=_ids(memories)))
        new.append(message_item("user", turn, "user", user_text, []))
        return self.render_items(items, new)

    def tool_items(self, items: Sequence[Item], turn: int, results: Sequence[ToolResultRecord],
                   answer_request: bool = False) -> list[Item]:
        """Tool results of one step, rendered as one group.

        ``answer_request``: the group ends with :data:`ANSWER_REQUEST`, a user-role message of
        the step (kind ``tool_result``, so it is counted and compacted with the results), for a
        next call that must answer: small models told nothing call again (Qwen2.5-Coder-0.5B
        after a calculator result writes the call once more, even with a note inside the result;
        a message of the user's after it makes it answer).
        """
        new = [message_item("tool_result", turn, "tool", self.truncate(r.content), [], tool_call_id=r.id,
                            name=r.name, is_error=r.is_error) for r in results]
        if new and answer_request:
            new.append(message_item("tool_result", turn, "user", ANSWER_REQUEST, []))
        return self.render_items(items, new) if new else []

    def summary_item(self, items: Sequence[Item], turn: int, text: str) -> Item:
        """A summary message (shown after the snapshot in place of hidden turns)."""
        snap = [to_message(items[i]) for i in comp.compute_view(list(items), turn).snapshot]
        item = message_item("summary", turn, "user", "Summary of the earlier conversation:\n" + text, [])
        item["token_ids"] = self.renderer.append(self.system_messages + snap, [to_message(item)])[0]
        return item

    def assistant_item(self, turn: int, output_ids: Sequence[int], prefix_ids: Sequence[int] = (),
                       suffix_ids: Sequence[int] = (), reasoning_mask: Sequence[bool] = (),
                       eos_token_ids: frozenset[int] = frozenset(), **message: Any) -> Item:
        """The stored assistant turn: generation prompt + ids as generated + trailer.

        Args:
            output_ids: generated ids (the end-of-sequence id included when generated).
            prefix_ids / suffix_ids: ids forced around the generated ones.
            reasoning_mask: per output id, True for reasoning tokens; when any,
                ``stripped_token_ids`` drops them (and the blank line after).
            eos_token_ids: the engine's end-of-sequence ids (``LLMEngine.eos_token_ids``);
                a reply that ended on one other than the template's end of turn
                ends on the template's instead (that last id was never prefilled,
                so no cached token changes).
            message: content, reasoning_content, tool_calls.
        """
        end = self.renderer.end_of_turn_id

        def closed(ids: list[int]) -> list[int]:
            if ids and ids[-1] in eos_token_ids:
                ids[-1] = end
            return ids if ids and ids[-1] == end else ids + [end]

        body = closed(list(prefix_ids) + list(output_ids) + list(suffix_ids))
        ids = self.gen_prompt_ids + body + self.renderer.trailer()
        item = message_item("assistant", turn, "assistant", message.pop("content", ""), ids, **message)
        if any(reasoning_mask):
            kept = [t for t, r in zip(output_ids, reasoning_mask) if not r]
            while kept and not self.renderer.decode([kept[0]]).strip():
                kept.pop(0)
            rest = list(output_ids[len(reasoning_mask):])
            stripped = closed(list(prefix_ids) + kept + rest + list(suffix_ids))
            item["stripped_token_ids"] = self.gen_prompt_ids + stripped + self.renderer.trailer()
        return item

    # -- budget helpers ----------------------------------------------------
    def fit(self, things: list[Any], fmt: Any, cap: int) -> list[Any]:
        """Longest prefix of ``things`` whose formatted message fits ``cap`` tokens."""
        chosen: list[Any] = []
        for t in things:
            if self.count_message_tokens(fmt(chosen + [t])) > cap:
                break
            chosen.append(t)
        return chosen

    def fit_retrieval(self, hits: Sequence[SearchHit], similarity_cutoff: float | None = None,
                      related: bool | None = None) -> RetrievalFit:
        """Hits that fit the budget's ``retrieval_cap``, never none while there are relevant hits.

        Hits under ``similarity_cutoff`` are not shown (:func:`~loom.orchestrator.relevance.split_relevant`;
        ``related``: whether the search is, when the caller decided it).

        In rank order, a hit that fits whole is shown; the first hit that does
        not fit, when nothing is shown yet, is cut at the last sentence
        boundary that fits (at a word when even one sentence is too long), so
        a top hit larger than the cap still yields text; later hits that do
        not fit are dropped and smaller ones after them still taken.
        """
        hits, below = split_relevant(hits, similarity_cutoff, related)
        fit = RetrievalFit(below_cutoff=[source_label(h) for h in below])
        cap = self.budget.retrieval_cap
        for hit in hits:
            if self.count_message_tokens(format_retrieval(fit.shown + [hit])) <= cap:
                fit.shown.append(hit)
                continue
            n = len(self.renderer.encode(hit.text))
            cut = None if fit.shown else self._cut_hit(hit, cap)
            if cut is None:
                fit.dropped.append(source_label(hit))
                fit.cut_tokens += n
            else:
                fit.shown.append(cut)
                fit.truncated.append(source_label(hit))
                fit.cut_tokens += n - len(self.renderer.encode(cut.text[: -len(TRUNCATED_MARK)]))
        return fit

    def _cut_hit(self, hit: SearchHit, cap: int) -> SearchHit | None:
        """A copy of ``hit`` with the longest sentence prefix that fits ``cap`` (``None``: not even a word)."""
        text = hit.text
        ends = [m.start() for m in _SENTENCE_END.finditer(text)]
        words = [m.start() for m in re.finditer(r"\s+", text)]

        def fits(end: int) -> bool:
            return self.count_message_tokens(format_retrieval([_with_text(hit, text[:end] + TRUNCATED_MARK)])) <= cap

        for bounds in (ends, words):
            lo, hi, best = 0, len(bounds) - 1, None
            while lo <= hi:  # token counts grow with the prefix: binary search the last that fits
                mid = (lo + hi) // 2
                if bounds[mid] > 0 and fits(bounds[mid]):
                    best, lo = bounds[mid], mid + 1
                else:
                    hi = mid - 1
            if best is not None:
                return _with_text(hit, text[:best].rstrip() + TRUNCATED_MARK)
        return None

    def truncate(self, text: str) -> str:
        """``text`` cut to the budget's ``tool_result_cap`` tokens, with a note when cut."""
        ids = self.renderer.encode(text)
        cap = self.budget.tool_result_cap
        if len(ids) <= cap:
            return text
        kept = self.renderer.decode(ids[:cap])
        return kept + f"\n[truncated: {len(ids) - cap} more tokens]"

    # -- assembly ----------------------------------------------------------
    def item_ids(self, item: Item, rebuilt: bool = False) -> list[int]:
        """The ids an item shows in a prompt.

        ``rebuilt``: a compaction made after the item was stored re-prefilled it
        (:func:`loom.orchestrator.compaction_plan.rebuilt`).  With ``keep_reasoning=False``
        an earlier turn's reply is shown without its reasoning only then: the
        cut re-prefills everything after it anyway, so dropping reasoning there
        costs no cache hit, while dropping it elsewhere would break the
        append-only prompt at that reply.
        """
        if rebuilt and not self.keep_reasoning and "stripped_token_ids" in item:
            return item["stripped_token_ids"]
        return item["token_ids"]

    def plan_compaction(self, items: list[Item], turn: int, extra_tokens: int = 0) -> comp.Plan | None:
        """Item groups to hide before the next call of ``turn`` (``None``: it fits).

        Args:
            extra_tokens: tokens still to come in that prompt (the after-turn
                forecast of the next turn's retrieval and message).

        Returns:
            a :class:`~loom.orchestrator.compaction_plan.Plan`: documents of older turns first
            (the retention policy), then whole turns, then this turn's oldest steps.
        """
        view = comp.compute_view(items, turn)
        redo = comp.rebuilt(items)
        sizes = {i: len(self.item_ids(items[i], i in redo)) for i in view.snapshot + view.history + view.tail}
        fixed = len(self.header_ids) + len(self.gen_prompt_ids) + sum(sizes[i] for i in view.snapshot + view.tail)
        fixed += (len(view.summary["token_ids"]) if view.summary else 0) + extra_tokens
        cap = self.budget.history_cap(fixed)
        over = fixed + sum(sizes[i] for i in view.history) - self.budget.prompt_limit
        reserve = self.budget.summary_tokens + 32 if self.budget.compaction == "summarize" else 0
        return comp.plan(items, view, sizes, max(cap, 0), self.budget.low_water, over, reserve,
                         self.budget.keep_retrieval_turns)

    def build(self, items: list[Item], turn: int) -> Context:
        """Assemble the prompt of the next call of ``turn`` from the stored items.

        Raises:
            ContextLengthError: the prompt exceeds ``budget.prompt_limit``
                (call :meth:`plan_compaction` and append its marker first).
        """
        view = comp.compute_view(items, turn)
        redo = comp.rebuilt(items)
        ctx = Context(token_ids=[], prompt_limit=self.budget.prompt_limit)

        def add(cls: str, ids: list[int], index: int | None = None) -> None:
            ctx.segments.append(Segment(cls, len(ctx.token_ids), len(ctx.token_ids) + len(ids), index))
            ctx.token_ids.extend(ids)

        for cls, ids in self.header:
            add(cls, ids)
        for i in view.snapshot:
            add("memory", self.item_ids(items[i], i in redo), i)
        start_history = len(ctx.token_ids)
        if view.summary is not None:
            add("history", view.summary["token_ids"])
        for i in view.history:
            add(prompt_class(items[i], turn), self.item_ids(items[i], i in redo), i)
        ctx.history_tokens = len(ctx.token_ids) - start_history
        for i in view.tail:
            add(prompt_class(items[i], turn), self.item_ids(items[i], i in redo), i)
        add(ctx.segments[-1].cls if view.tail else "user", self.gen_prompt_ids)
        ctx.history_cap = self.budget.history_cap(len(ctx.token_ids) - ctx.history_tokens)
        if len(ctx.token_ids) > ctx.prompt_limit:
            raise ContextLengthError(
                f"prompt of {len(ctx.token_ids)} tokens exceeds the limit of {ctx.prompt_limit} "
                f"(window {self.budget.max_model_len} - {self.budget.max_tokens} reserved)", param="messages")
        return ctx


def _with_text(hit: SearchHit, text: str) -> SearchHit:
    """A copy of a hit (frozen dataclass or plain object) with another ``text``."""
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type):
        return dataclasses.replace(hit, text=text)
    out = copy.copy(hit)
    setattr(out, "text", text)  # a plain object's attribute; SearchHit only promises to read it
    return out


def _ids(memories: Sequence[str | MemoryHit]) -> list[int | None] | None:
    ids = [getattr(m, "id", None) for m in memories]
    return ids if any(i is not None for i in ids) else None
