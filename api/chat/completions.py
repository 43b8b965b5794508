"""Run one chat completion on the engine and shape its output as OpenAI's objects.

The engine's text deltas (special tokens kept: ``skip_special_tokens=False``;
stop strings already cut; eos left out) are fed to
``orchestrator.parsers.StreamingParser``, which splits
``<think>`` reasoning, content and ``<tool_call>`` blocks; each output token is
classed ``reasoning`` / ``tool_call`` / ``output`` by
``orchestrator.classify.OutputClassifier`` (the agent's own rule: a closing
marker belongs to the block it closes), which gives the exact
``completion_tokens_details.reasoning_tokens``.  A forced tool call is a
grammar-constrained call in the model's format (``orchestrator.formats``),
parsed like any other; it is never shown as content: when ``max_tokens`` cut
it short the choice ends with ``finish_reason="length"`` and an ``error``
naming the budget.  Constrained JSON output (response_format) is all content.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from api.chat.prompt import PreparedChat
from api.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceError,
    ChunkChoice,
    CompletionTokensDetails,
    Delta,
    DeltaFunction,
    DeltaToolCall,
    FunctionCall,
    PromptTokensDetails,
    ResponseMessage,
    ToolCall,
    Usage,
)
from orchestrator.classify import OutputClassifier
from orchestrator.parsers import ParsedToolCall, ParserEvent, StreamingParser


@dataclass
class CompletionRun:
    """One request: feeds engine outputs through the parser.

    ``feed(out)`` parses one ``RequestOutput``, ``to_delta(events)`` shapes a stream ``Delta``;
    ``result()`` builds the final non-streamed ``ChatCompletion``.
    """

    prepared: PreparedChat
    model: str
    request_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    output_classes: list[str] = field(default_factory=list)
    last: Any = None  # last RequestOutput
    _call_ids: dict[int, str] = field(default_factory=dict)
    _named: set[int] = field(default_factory=set)
    _bad_calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        p = self.prepared
        self.parser: StreamingParser | None = None
        if not p.json_output:
            self.parser = StreamingParser(parse_tools=p.parse_tools or p.forced_tool_call, fmt=p.fmt,
                                          tool_names=p.tool_names or None)
            self._classifier = OutputClassifier(self.parser, classes=self.output_classes)
        self.json_text = ""

    # feeding -------------------------------------------------------------------------
    def feed(self, out: Any) -> list[ParserEvent]:
        """Events completed by one ``RequestOutput`` (its ``new_text`` / ``new_token_ids``).

        The engine's text already honours stop strings and leaves out eos.
        """
        self.last = out
        text, n = out.new_text or "", len(out.new_token_ids)
        if self.parser is None:
            self.json_text += text
            self.output_classes += ["output"] * n
            return [ParserEvent("content", text=text)] if text else []
        events = self._classifier.feed(text, n)
        if out.finished:
            events += self._classifier.finish()
        return events

    # shaping -------------------------------------------------------------------------
    def _call_id(self, index: int) -> str:
        return self._call_ids.setdefault(index, f"call_{uuid.uuid4().hex[:24]}")

    def to_delta(self, events: list[ParserEvent]) -> Delta | None:
        """Merge events into one stream ``Delta`` (``None`` when nothing shows)."""
        content, reasoning, calls = "", "", []
        for ev in events:
            if ev.kind == "content":
                content += ev.text
            elif ev.kind == "reasoning":
                reasoning += ev.text
            elif ev.kind == "tool_call_delta" and ev.name is not None:
                self._named.add(ev.index)
                calls.append(DeltaToolCall(index=ev.index, id=self._call_id(ev.index), type="function",
                                           function=DeltaFunction(name=ev.name, arguments="")))
            elif ev.kind == "tool_call_delta" and ev.arguments_delta and ev.index in self._named:
                calls.append(DeltaToolCall(index=ev.index, function=DeltaFunction(arguments=ev.arguments_delta)))
            elif ev.kind == "tool_call" and ev.call is not None and ev.call.error is not None \
                    and ev.index not in self._named and not self.prepared.forced_tool_call:
                content += self._raw_call_text(ev.call)  # a malformed free-text call stays content
        if not (content or reasoning or calls):
            return None
        return Delta(content=content or None, reasoning_content=reasoning or None, tool_calls=calls or None)

    def _raw_call_text(self, call: ParsedToolCall) -> str:
        fmt = self.prepared.fmt
        if fmt.open_in_body:
            return call.raw
        return f"{fmt.call_open}{call.raw}{fmt.call_close or ''}"

    def error(self) -> ChoiceError | None:
        """Set when a forced tool call did not complete (``max_tokens`` ran out inside it)."""
        if not self.prepared.forced_tool_call or self.tool_calls() or self.last is None:
            return None
        n = getattr(self.prepared.sampling_params, "max_tokens", len(self.last.token_ids))
        return ChoiceError(
            message=f"max_tokens={n} is too small for the forced tool call: the output ended after {n} "
                    "tokens, before the call was complete; retry with a larger max_tokens",
            param="max_tokens", code="tool_call_truncated")

    def tool_calls(self) -> list[ToolCall]:
        """Well-formed calls of the reply, in order."""
        if self.parser is None:
            return []
        import json

        return [
            ToolCall(id=self._call_id(c.index), function=FunctionCall(name=c.name or "",
                     arguments=json.dumps(c.arguments, ensure_ascii=False)))
            for c in self.parser.calls if c.error is None
        ]

    def finish_reason(self) -> str:
        """``tool_calls`` when the reply called a tool, else the engine's reason."""
        if self.tool_calls():
            return "tool_calls"
        return (self.last.finish_reason if self.last is not None else None) or "stop"

    def usage(self) -> Usage:
        """OpenAI usage with cached prompt tokens and reasoning tokens."""
        out = self.last
        prompt = len(self.prepared.prompt_token_ids)
        completion = len(out.token_ids) if out is not None else 0
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=out.num_cached_tokens if out else 0),
            completion_tokens_details=CompletionTokensDetails(
                reasoning_tokens=self.output_classes.count("reasoning")),
        )

    def token_classes(self) -> dict[str, int]:
        """Token counts by class for ``loom_tokens`` (prompt cached/computed, outputs)."""
        u = self.usage()
        cached = u.prompt_tokens_details.cached_tokens
        counts = {"prompt.cached": cached, "prompt.computed": u.prompt_tokens - cached}
        for c in ("reasoning", "tool_call", "output"):
            counts[c] = self.output_classes.count(c)
        return counts

    def result(self) -> ChatCompletion:
        """The non-streamed response (after the last output was fed)."""
        calls = self.tool_calls()
        if self.parser is None:
            content, reasoning = self.json_text, None
        else:
            bad = [] if self.prepared.forced_tool_call else [c for c in self.parser.calls if c.error is not None]
            content = self.parser.content + "".join(self._raw_call_text(c) for c in bad)
            reasoning = self.parser.reasoning or None
        msg = ResponseMessage(content=content if (content or not calls) else None,
                              reasoning_content=reasoning, tool_calls=calls or None)
        return ChatCompletion(id=self.request_id, created=self.created, model=self.model,
                              choices=[Choice(message=msg, finish_reason=self.finish_reason(),
                                              error=self.error())],
                              usage=self.usage())

    def chunk(self, delta: Delta, finish_reason: str | None = None) -> ChatCompletionChunk:
        """A stream chunk carrying ``delta`` (the last one carries ``error`` when there is one)."""
        error = self.error() if finish_reason is not None else None
        return ChatCompletionChunk(id=self.request_id, created=self.created, model=self.model,
                                   choices=[ChunkChoice(delta=delta, finish_reason=finish_reason, error=error)])

    def usage_chunk(self) -> ChatCompletionChunk:
        """The ``include_usage`` chunk: no choices, usage set."""
        return ChatCompletionChunk(id=self.request_id, created=self.created, model=self.model,
                                   choices=[], usage=self.usage())


async def stream_chunks(run: CompletionRun, outputs: AsyncIterator[Any], first: Any,
                        include_usage: bool) -> AsyncIterator[ChatCompletionChunk]:
    """OpenAI chunks for a stream whose first ``RequestOutput`` was already awaited."""
    yield run.chunk(Delta(role="assistant", content=""))
    out = first
    while True:
        delta = run.to_delta(run.feed(out))
        if delta is not None:
            yield run.chunk(delta)
        if out.finished:
            break
        out = await outputs.__anext__()
    yield run.chunk(Delta(), finish_reason=run.finish_reason())
    if include_usage:
        yield run.usage_chunk()
