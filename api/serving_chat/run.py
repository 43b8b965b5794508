"""Run one chat completion on the engine and shape its output as OpenAI's objects.

The engine's text deltas (special tokens kept: ``skip_special_tokens=False``;
stop strings already cut; eos left out) are fed to
``loom.orchestrator.parsers.StreamingParser``, which splits
``<think>`` reasoning, content and ``<tool_call>`` blocks; each output token is
classed ``reasoning`` / ``tool_call`` / ``output`` by
``loom.orchestrator.classify.OutputClassifier`` (the agent's own rule: a closing
marker belongs to the block it closes), which gives the exact
``completion_tokens_details.reasoning_tokens``.  A forced tool call is a
grammar-constrained call in the model's format (``loom.orchestrator.formats``),
parsed like any other; it is never shown as content: when ``max_tokens`` cut
it short the choice ends with ``finish_reason="length"`` and an ``error``
naming the budget.  Constrained output (response_format, structured_outputs,
guided_*) is all content.

A request with ``n`` choices is one ``CompletionRun`` holding one
``ChoiceRun`` per engine request; usage counts the shared prompt once and sums
the choices' completion tokens (as vLLM).  ``logprobs`` follow OpenAI's chat
shape, one entry per output token (the engine's raw model log-probabilities,
as vLLM's default), each token's ``bytes`` its exact UTF-8 bytes (a byte-level
BPE token may hold part of a character, whose ``token`` text then shows
U+FFFD); a stream chunk carries the entries of the tokens it delivers (tokens
whose text the parser still holds back ride on the next chunk).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from loom.api.serving_chat.logprobs import TokenText, finite_logprob
from loom.api.serving_chat.prompt import PreparedChat
from loom.api.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChoiceError,
    ChunkChoice,
    CompletionTokensDetails,
    FinishReason,
    Delta,
    DeltaFunction,
    DeltaToolCall,
    FunctionCall,
    PromptTokensDetails,
    ResponseMessage,
    TokenLogprob,
    ToolCall,
    TopLogprob,
    Usage,
)
from loom.api.engine_io import served_finish_reason
from loom.orchestrator.classify import OutputClassifier
from loom.orchestrator.parsers import ParsedToolCall, ParserEvent, StreamingParser
from loom.orchestrator.protocols import Tokenizer
from loom.runtime.outputs import RequestOutput


@dataclass
class ChoiceRun:
    """One choice: feeds its engine outputs through the parser.

    ``feed(out)`` parses one ``RequestOutput``, ``to_delta(events)`` shapes a stream ``Delta``,
    ``message()`` the final message.
    """

    prepared: PreparedChat
    index: int = 0
    output_classes: list[str] = field(default_factory=list)
    last: RequestOutput | None = None
    _call_ids: dict[int, str] = field(default_factory=dict)
    _named: set[int] = field(default_factory=set)
    _logprobs_sent: int = 0  # output tokens whose logprobs a stream chunk carried
    _ids_sent: int = 0  # output tokens whose ids a stream chunk carried (return_token_ids)

    def __post_init__(self) -> None:
        p = self.prepared
        self.parser: StreamingParser | None = None
        if not p.constrained:
            self.parser = StreamingParser(parse_tools=p.parse_tools or p.forced_tool_call, fmt=p.fmt,
                                          tool_names=p.tool_names or None)
            self._classifier = OutputClassifier(self.parser, classes=self.output_classes)
        self.json_text = ""

    # feeding -------------------------------------------------------------------------
    def feed(self, out: RequestOutput) -> list[ParserEvent]:
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
            events += self._classifier.finish(cut_off=out.finish_reason == "length")
        return events

    # shaping -------------------------------------------------------------------------
    def _call_id(self, index: int) -> str:
        return self._call_ids.setdefault(index, f"call_{uuid.uuid4().hex[:24]}")

    def to_delta(self, events: list[ParserEvent]) -> Delta | None:
        """Merge events into one stream ``Delta`` (``None`` when nothing shows)."""
        content, reasoning, calls = "", "", []
        for ev in events:
            if ev.kind.startswith("tool_call") and not self._allowed(ev.index):
                continue  # parallel_tool_calls=false: only the reply's first call is returned
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

    def _allowed(self, index: int | None) -> bool:
        """Whether call ``index`` is returned (``parallel_tool_calls=false``: the first call only)."""
        if self.prepared.parallel_tool_calls or index is None or self.parser is None:
            return True
        first = next((c.index for c in self.parser.calls), index)
        return index == first

    def tool_calls(self) -> list[ToolCall]:
        """Well-formed calls of the reply, in order (ids ``call_<24 hex>``, unique per call);
        with ``parallel_tool_calls=false`` the first one only (OpenAI)."""
        if self.parser is None:
            return []
        calls = [
            ToolCall(id=self._call_id(c.index), function=FunctionCall(name=c.name or "",
                     arguments=json.dumps(c.arguments, ensure_ascii=False)))
            for c in self.parser.calls if c.error is None
        ]
        return calls if self.prepared.parallel_tool_calls else calls[:1]

    def finish_reason(self) -> FinishReason:
        """``tool_calls`` when the reply called a tool, else the engine's reason."""
        if self.tool_calls():
            return "tool_calls"
        return served_finish_reason(self.last.finish_reason if self.last is not None else None) or "stop"

    def completion_tokens(self) -> int:
        """Output tokens so far."""
        return len(self.last.token_ids) if self.last is not None else 0

    def message(self) -> ResponseMessage:
        """The final assistant message (after the last output was fed)."""
        calls = self.tool_calls()
        if self.parser is None:
            content, reasoning = self.json_text, None
        else:
            bad = [] if self.prepared.forced_tool_call else [c for c in self.parser.calls if c.error is not None]
            content = self.parser.content + "".join(self._raw_call_text(c) for c in bad)
            reasoning = self.parser.reasoning or None
        return ResponseMessage(content=content if (content or not calls) else None,
                               reasoning_content=reasoning, tool_calls=calls or None)

    # logprobs ------------------------------------------------------------------------
    def logprobs(self, text_of: TokenText | None, start: int = 0) -> ChoiceLogprobs | None:
        """OpenAI ``logprobs`` of output tokens ``start:`` (``None`` unless the request asked)."""
        top = self.prepared.top_logprobs
        if top is None or text_of is None or self.last is None:
            return None
        ids, rows = self.last.token_ids, self.last.logprobs or []
        content = []
        for token, row in zip(ids[start:], rows[start:]):
            text, raw = text_of(token)
            best = sorted(row.items(), key=lambda kv: -kv[1])[:top]
            content.append(TokenLogprob(token=text, logprob=finite_logprob(row.get(token)), bytes=raw, top_logprobs=[
                TopLogprob(token=t, logprob=finite_logprob(lp), bytes=b)
                for (t, b), lp in ((text_of(i), lp) for i, lp in best)]))
        return ChoiceLogprobs(content=content)

    def token_ids(self) -> list[int] | None:
        """The output ids (``return_token_ids``), else ``None``."""
        if not self.prepared.return_token_ids or self.last is None:
            return None
        return list(self.last.token_ids)

    def new_token_ids(self) -> list[int] | None:
        """Output ids no stream chunk has carried yet (then marks them carried); ``None`` unless asked."""
        ids = self.token_ids()
        if ids is None:
            return None
        start, self._ids_sent = self._ids_sent, len(ids)
        return ids[start:]

    def new_logprobs(self, text_of: TokenText | None) -> ChoiceLogprobs | None:
        """Logprobs of the tokens no stream chunk has carried yet (then marks them carried)."""
        if self.prepared.top_logprobs is None or self.last is None:
            return None
        start, self._logprobs_sent = self._logprobs_sent, len(self.last.token_ids)
        return self.logprobs(text_of, start)


@dataclass
class CompletionRun:
    """One request: its ``n`` choices, shaped into OpenAI's completion and chunks.

    ``feed(out, index)`` / ``to_delta(events, index)`` work on choice ``index``;
    ``result()`` builds the non-streamed ``ChatCompletion``; ``tokenizer`` is
    needed only for logprobs (token text and bytes).
    """

    prepared: PreparedChat
    model: str
    tokenizer: Tokenizer | None = None
    request_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    started_ns: int = field(default_factory=time.time_ns)  # when the request arrived (its trace span's start)

    def __post_init__(self) -> None:
        self.choices = [ChoiceRun(self.prepared, i) for i in range(max(1, self.prepared.n))]
        self.text_of = TokenText(self.tokenizer) if self.tokenizer is not None else None

    def feed(self, out: RequestOutput, index: int = 0) -> list[ParserEvent]:
        """Parser events of choice ``index``'s next ``RequestOutput``."""
        return self.choices[index].feed(out)

    def to_delta(self, events: list[ParserEvent], index: int = 0) -> Delta | None:
        """Choice ``index``'s stream ``Delta`` for ``events`` (``None`` when nothing shows)."""
        return self.choices[index].to_delta(events)

    def finish_reason(self, index: int = 0) -> FinishReason:
        """Choice ``index``'s finish reason."""
        return self.choices[index].finish_reason()

    @property
    def output_classes(self) -> list[str]:
        """Every choice's per-token classes, choice by choice."""
        return [c for choice in self.choices for c in choice.output_classes]

    @property
    def finished(self) -> bool:
        """Every choice has its last output."""
        return all(c.last is not None and c.last.finished for c in self.choices)

    def usage(self) -> Usage:
        """OpenAI usage: the shared prompt once, completion and reasoning tokens summed over choices;
        cached tokens are the first choice's (those the prompt found cached when it arrived)."""
        first = self.choices[0].last
        prompt = len(self.prepared.prompt_token_ids)
        completion = sum(c.completion_tokens() for c in self.choices)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=first.num_cached_tokens if first else 0),
            completion_tokens_details=CompletionTokensDetails(
                reasoning_tokens=self.output_classes.count("reasoning")),
        )

    def trace(self) -> None:
        """Record this request as a ``chat`` span (:func:`loom.orchestrator.tracing.record_chat`; a no-op without
        a tracer provider)."""
        from loom.orchestrator.tracing import record_chat

        u = self.usage()
        first = self.choices[0].last
        ttft = (first.first_token_time - first.arrival_time) if first is not None and first.first_token_time else None
        sp = self.prepared.sampling_params
        record_chat(self.model, self.request_id, self.started_ns,
                    {"max_tokens": sp.max_tokens, "temperature": sp.temperature},
                    {"prompt": u.prompt_tokens, "cached": u.prompt_tokens_details.cached_tokens,
                     "completion": u.completion_tokens, "reasoning": u.completion_tokens_details.reasoning_tokens},
                    self.token_classes(), ttft, [str(self.finish_reason(c.index)) for c in self.choices])

    def token_classes(self) -> dict[str, int]:
        """Token counts by class for ``loom_tokens`` (prompt cached/computed, outputs)."""
        u = self.usage()
        cached = u.prompt_tokens_details.cached_tokens
        counts = {"prompt.cached": cached, "prompt.computed": u.prompt_tokens - cached}
        classes = self.output_classes
        for c in ("reasoning", "tool_call", "output"):
            counts[c] = classes.count(c)
        return counts

    def result(self) -> ChatCompletion:
        """The non-streamed response (after every choice's last output was fed)."""
        return ChatCompletion(id=self.request_id, created=self.created, model=self.model, choices=[
            Choice(index=c.index, message=c.message(), finish_reason=c.finish_reason(), error=c.error(),
                   logprobs=c.logprobs(self.text_of), token_ids=c.token_ids()) for c in self.choices],
            usage=self.usage(), prompt_token_ids=self._prompt_ids())

    def _prompt_ids(self) -> list[int] | None:
        return list(self.prepared.prompt_token_ids) if self.prepared.return_token_ids else None

    def chunk(self, delta: Delta, finish_reason: FinishReason | None = None, index: int = 0,
              logprobs: ChoiceLogprobs | None = None, usage: Usage | None = None,
              token_ids: list[int] | None = None, first: bool = False) -> ChatCompletionChunk:
        """A stream chunk of choice ``index`` carrying ``delta`` (the last one carries ``error`` when
        there is one; the ``first`` of the stream carries ``prompt_token_ids`` when asked)."""
        error = self.choices[index].error() if finish_reason is not None else None
        return ChatCompletionChunk(id=self.request_id, created=self.created, model=self.model, usage=usage,
                                   prompt_token_ids=self._prompt_ids() if first else None,
                                   choices=[ChunkChoice(index=index, delta=delta, finish_reason=finish_reason,
                                                        error=error, logprobs=logprobs, token_ids=token_ids)])

    def usage_chunk(self) -> ChatCompletionChunk:
        """The ``include_usage`` chunk: no choices, usage set."""
        return ChatCompletionChunk(id=self.request_id, created=self.created, model=self.model,
                                   choices=[], usage=self.usage())


async def stream_chunks(run: CompletionRun, outputs: AsyncIterator[tuple[int, RequestOutput]], include_usage: bool,
                        continuous_usage: bool = False) -> AsyncIterator[ChatCompletionChunk]:
    """OpenAI chunks of ``(choice index, RequestOutput)`` pairs (``loom.api.engine_io.merge_outputs``).

    Each choice opens with a ``role`` chunk and ends with a ``finish_reason``
    chunk; chunks of different choices interleave as their tokens come.
    ``continuous_usage`` (vLLM) puts the cumulative usage on every chunk.
    """
    usage = run.usage if continuous_usage else lambda: None
    opened: set[int] = set()
    async for index, out in outputs:
        choice = run.choices[index]
        if index not in opened:
            yield run.chunk(Delta(role="assistant", content=""), index=index, usage=usage(), first=not opened)
            opened.add(index)
        delta = choice.to_delta(choice.feed(out))
        if out.finished:
            logprobs, ids = choice.new_logprobs(run.text_of), choice.new_token_ids()
            if delta is not None:
                yield run.chunk(delta, index=index, logprobs=logprobs, usage=usage(), token_ids=ids)
                logprobs = ids = None
            yield run.chunk(Delta(), finish_reason=choice.finish_reason(), index=index, logprobs=logprobs,
                            usage=usage(), token_ids=ids)
        elif delta is not None:
            yield run.chunk(delta, index=index, logprobs=choice.new_logprobs(run.text_of), usage=usage(),
                            token_ids=choice.new_token_ids())
    if include_usage:
        yield run.usage_chunk()
