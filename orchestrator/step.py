"""One model call of the agent loop: stream, parse, classify tokens, account.

The engine's own text (``RequestOutput.new_text``: detokenized once, stop
strings cut, eos left out) is fed to the streaming parser; each generated
token gets an output class from the parser state around the text it produced
(:mod:`loom.orchestrator.classify`); the classes drive the ledger's decode-time
split and the reasoning mask of the stored reply.

A reply ends at its first call that repeats an earlier call of the same reply
(same name, same arguments): the engine request is aborted there, the repeat is
dropped, and the stored reply's tokens end after the last call kept.  Small
models asked for several calls in one reply (``parallel_tool_calls``, forced)
write the right ones and then repeat them until ``max_tokens``: SmolLM2-135M
wrote 6-10 calls for BFCL entries that need 2-4, every one after the first
repeats a repeat (Loom never runs a call twice in a turn anyway, see
``loom.orchestrator.runner``).  So that a consumer of the stream never sees
part of a call that is then dropped, the deltas of a call whose tool an earlier
call of the reply used are held until the call is complete; calls of other
tools stream as they come.
"""

from __future__ import annotations

import json
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from loom.json_types import JSONObject
from loom.runtime.sampling_params import SamplingParams
from loom.tools.base import canonical_json

from loom.orchestrator.context import Context
from loom.orchestrator.classify import OutputClassifier
from loom.orchestrator.events import AgentEvent, ContentDelta, ReasoningDelta, ToolCallEvent
from loom.orchestrator.items import new_tool_call_id
from loom.orchestrator.ledger import Ledger, PriceTable
from loom.orchestrator.parsers import ParsedToolCall, ParserEvent, StreamingParser
from loom.orchestrator.protocols import ModelClient


@dataclass
class StepOutcome:
    """What one model call produced."""

    output_ids: list[int] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    parser: StreamingParser = field(default_factory=StreamingParser)
    ledger: Ledger = field(default_factory=Ledger)
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    call_ids: dict[int, str] = field(default_factory=dict)

    def call_id(self, index: int) -> str:
        """The id of this call's tool call ``index`` (``call_<random>``, made on first use)."""
        if index not in self.call_ids:
            self.call_ids[index] = new_tool_call_id()
        return self.call_ids[index]

    @property
    def calls(self) -> list[ParsedToolCall]:
        return self.parser.calls

    def tool_calls_field(self) -> list[JSONObject]:
        """OpenAI-style ``tool_calls`` of the stored assistant item."""
        return [{"id": self.call_id(c.index), "type": "function",
                 "function": {"name": c.name or "",
                              "arguments": c.raw if c.error else json.dumps(c.arguments, sort_keys=True)}}
                for c in self.calls]


@dataclass
class _RepeatGuard:
    """Finds a call that repeats an earlier call of the same reply, holding back its deltas meanwhile."""

    kept: set[tuple[str, str]] = field(default_factory=set)  # (name, canonical arguments) of complete calls
    names: set[str] = field(default_factory=set)  # their tools
    held: dict[int, list[ParserEvent]] = field(default_factory=dict)  # call index -> its deltas, held
    streaming: set[int] = field(default_factory=set)  # calls whose deltas go out as they come

    def filter(self, events: list[ParserEvent]) -> tuple[list[ParserEvent], ParsedToolCall | None]:
        """The events to pass on, and the repeating call when one completed (the events before it only)."""
        out: list[ParserEvent] = []
        for e in events:
            if e.kind == "tool_call_delta":
                held = self.held.get(e.index)
                if held is not None:
                    held.append(e)
                    if e.name is not None and e.name not in self.names:  # another tool: cannot repeat
                        out += self.held.pop(e.index)
                        self.streaming.add(e.index)
                elif e.index not in self.streaming and self.names and (e.name is None or e.name in self.names):
                    self.held[e.index] = [e]
                else:
                    self.streaming.add(e.index)
                    out.append(e)
                continue
            if e.kind == "tool_call" and e.call is not None:
                c = e.call
                key = (c.name, canonical_json(c.arguments)) if c.error is None and c.name else None
                if key is not None and key in self.kept:
                    self.held.pop(c.index, None)
                    return out, c
                out += self.held.pop(c.index, [])
                if key is not None:
                    self.kept.add(key)
                    self.names.add(key[0])
            out.append(e)
        return out, None


def _kept_tokens(tokenizer: Any, output_ids: list[int], close: str, calls: int) -> int:
    """The fewest of ``output_ids`` whose text holds ``calls`` ``close`` markers (a binary search over prefixes:
    the engine's text deltas lag their tokens wherever a stop string may be starting)."""
    lo, hi = 0, len(output_ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if tokenizer.decode(output_ids[:mid], skip_special_tokens=False).count(close) >= calls:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _to_events(events: list[ParserEvent], outcome: StepOutcome) -> list[AgentEvent]:
    out: list[AgentEvent] = []
    for e in events:
        if e.kind == "reasoning":
            out.append(ReasoningDelta(e.text))
        elif e.kind == "content":
            out.append(ContentDelta(e.text))
        elif e.kind == "tool_call_delta":
            out.append(ToolCallEvent(outcome.call_id(e.index), e.name, e.arguments_delta, index=e.index))
        else:
            c = e.call
            assert c is not None
            out.append(ToolCallEvent(outcome.call_id(c.index), c.name, "", dict(c.arguments),
                                     index=c.index, error=c.error))
    return out


async def model_call(engine: ModelClient, ctx: Context, sampling_params: SamplingParams, outcome: StepOutcome,
                     turn: int, step: int, prices: PriceTable, request_id: str | None = None,
                     output_class: str | None = None) -> AsyncIterator[AgentEvent]:
    """Run one call; yield its events; fill ``outcome`` (ledger last).

    ``output_class``: one ledger output class for every generated token (a
    side call such as the condense-question rewrite), instead of the parser's.

    Raises:
        whatever the engine raises at submission.
    """
    classifier = OutputClassifier(outcome.parser, output_class)
    fmt = outcome.parser.fmt
    # a repeat can be cut from the stored reply only where each call closes its own block
    guard = _RepeatGuard() if fmt.call_close is not None and not fmt.array else None
    last = None
    repeat: ParsedToolCall | None = None
    async with aclosing(engine.stream(ctx.token_ids, sampling_params, request_id)) as stream:
        async for out in stream:  # leaving the loop early closes the stream, which aborts the request
            last = out
            events = classifier.feed(out.new_text, len(out.new_token_ids))
            outcome.output_ids += out.new_token_ids
            if guard is not None:
                events, repeat = guard.filter(events)
            for ev in _to_events(events, outcome):
                yield ev
            if repeat is not None:
                break
    if repeat is None:  # the reply's end may complete its last call: through the guard as well
        events = classifier.finish(cut_off=last is not None and last.finish_reason == "length")
        if guard is not None:
            events, repeat = guard.filter(events)
        for ev in _to_events(events, outcome):
            yield ev
    outcome.classes = classifier.classes
    if last is None:
        return
    if repeat is None and len(outcome.output_ids) != len(last.token_ids):  # engine gave no per-step deltas
        outcome.output_ids = list(last.token_ids)
        outcome.classes = (outcome.classes + [output_class or "output"] * len(last.token_ids))[: len(last.token_ids)]
    outcome.finish_reason = last.finish_reason if repeat is None else "stop"
    outcome.num_cached_tokens = last.num_cached_tokens
    outcome.ledger = Ledger.for_call(
        ctx.spans(), last.num_cached_tokens, outcome.classes,
        arrival_time=last.arrival_time, first_token_time=last.first_token_time,
        token_times=last.token_times, finish_time=last.finish_time if repeat is None else time.monotonic(),
        spec_rejected=max(0, last.num_draft_tokens - last.num_accepted_tokens),
        recompute_tokens=last.num_recompute_tokens, recompute_cached_tokens=last.num_recompute_cached_tokens,
        prompt_misses=getattr(last, "kv_miss_tokens", None), tier_tokens=getattr(last, "kv_tier_tokens", 0),
        prices=prices)
    if repeat is not None:  # the ledger counted every token made; the reply keeps those up to the last call kept
        outcome.parser.calls = [c for c in outcome.parser.calls if c.index != repeat.index]
        assert fmt.call_close is not None
        kept = _kept_tokens(engine.tokenizer, outcome.output_ids, fmt.call_close, len(outcome.parser.calls))
        del outcome.output_ids[kept:], outcome.classes[kept:]
