"""One model call of the agent loop: stream, parse, classify tokens, account.

The engine's own text (``RequestOutput.new_text``: detokenized once, stop
strings cut, eos left out) is fed to the streaming parser; each generated
token gets an output class from the parser state around the text it produced
(:mod:`loom.orchestrator.classify`); the classes drive the ledger's decode-time
split and the reasoning mask of the stored reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import AsyncIterator

from loom.json_types import JSONObject
from loom.runtime.sampling_params import SamplingParams

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
    last = None
    async for out in engine.stream(ctx.token_ids, sampling_params, request_id):
        last = out
        events = classifier.feed(out.new_text, len(out.new_token_ids))
        outcome.output_ids += out.new_token_ids
        for ev in _to_events(events, outcome):
            yield ev
    for ev in _to_events(classifier.finish(cut_off=last is not None and last.finish_reason == "length"), outcome):
        yield ev
    outcome.classes = classifier.classes
    if last is None:
        return
    if len(outcome.output_ids) != len(last.token_ids):  # engine gave no per-step deltas
        outcome.output_ids = list(last.token_ids)
        outcome.classes = (outcome.classes + [output_class or "output"] * len(last.token_ids))[: len(last.token_ids)]
    outcome.finish_reason = last.finish_reason
    outcome.num_cached_tokens = last.num_cached_tokens
    outcome.ledger = Ledger.for_call(
        ctx.spans(), last.num_cached_tokens, outcome.classes,
        arrival_time=last.arrival_time, first_token_time=last.first_token_time,
        token_times=last.token_times, finish_time=last.finish_time,
        spec_rejected=max(0, last.num_draft_tokens - last.num_accepted_tokens),
        recompute_tokens=last.num_recompute_tokens, recompute_cached_tokens=last.num_recompute_cached_tokens,
        prompt_misses=getattr(last, "kv_miss_tokens", None), tier_tokens=getattr(last, "kv_tier_tokens", 0),
        prices=prices)
