"""Streaming parser for model output: ``<think>`` reasoning, answer content and
tool-call blocks, fed text token by token, in the model's own format.

The markers come from a :class:`~loom.orchestrator.formats.ToolCallFormat`
(``<tool_call>...</tool_call>`` for Hermes/Qwen and Loom's default, a bare JSON
reply for Llama 3.1, ``[TOOL_CALLS]`` + a JSON array for Mistral); ``<think>``
is recognised only when the format says the model reasons. The default
format is Hermes with reasoning.

Design: a small state machine over three states (``content``, ``reasoning``,
``tool_call``).  Markers may arrive split across deltas ("<th" + "ink>"), so a
suffix of the input that could still become a marker is held back until the
next delta decides it.  Inside a tool-call block the arguments are streamed as
they arrive the way vLLM's Hermes tool parser does: once ``"name"`` and the
``"arguments":`` (or ``"parameters":``) key have been seen, every further character is emitted except
a trailing ``}`` plus whitespace that may turn out to be the outer object's
close.  The concatenated ``arguments_delta`` strings are therefore a prefix of
(and for a well-formed block equal to) the raw arguments JSON text; a block
that could not be streamed (a JSON array of calls) announces each call's name
and arguments when it closes.  A block that is not valid JSON, or lacks
``name`` / object arguments, becomes a :class:`ParsedToolCall` with ``error``
set; it is never raised, so the agent loop can report it to the model as a
tool error.  A format whose calls run to the end of the reply closes the
block in :meth:`StreamingParser.finish`.

With tools in play, the open tag of a tool result (``<tool_response>``, which
the default and Hermes formats wrap results in) is dropped from content: a
small model answering after a result often starts by copying the wrapper.
The agent also stops a free step at the close tag (``SamplingParams.stop``),
so the answer is the result it restated and not an invented next one.

The parser is text-only and model-agnostic, so the REST chat-completions
endpoint reuses it for ``delta.reasoning_content`` / ``delta.tool_calls``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal

from loom.json_types import JSONObject
from loom.orchestrator.formats.bare import BARE_OPENS, FENCE, bare_call_head
from loom.orchestrator.formats.format import HERMES, TOOL_RESULT_TAGS, ToolCallFormat

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
#: the parser's default format: Hermes ``<tool_call>`` blocks, ``<think>`` reasoning
HERMES_THINK = HERMES.with_tokenizer(reasoning=True)

ParserState = Literal["content", "reasoning", "tool_call"]

_NAME_ARGS = re.compile(r'^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_HOLDBACK = re.compile(r"\s*\}?\s*$")


@dataclass
class ParsedToolCall:
    """One complete ``<tool_call>`` block.

    Attributes:
        index: position of the call in this reply (0-based).
        name: tool name, or ``None`` when the block could not be parsed.
        arguments: parsed arguments object (``{}`` on error).
        raw: the block's text between the markers, stripped.
        error: why the block is malformed, or ``None``.
    """

    index: int
    name: str | None
    arguments: JSONObject
    raw: str
    error: str | None = None


@dataclass
class ParserEvent:
    """One parser output.

    ``kind`` is ``reasoning`` / ``content`` (``text`` set), ``tool_call_delta``
    (``index``, ``name`` on the first delta that knows it, ``arguments_delta``)
    or ``tool_call`` (``call`` set: the finished block).
    """

    kind: Literal["reasoning", "content", "tool_call_delta", "tool_call"]
    text: str = ""
    index: int = -1
    name: str | None = None
    arguments_delta: str = ""
    call: ParsedToolCall | None = None


def parse_tool_block(index: int, raw: str, fmt: ToolCallFormat = HERMES_THINK) -> ParsedToolCall:
    """Parse the JSON text of one single-call block; errors become ``error``."""
    return parse_block(index, raw, fmt)[0]


def parse_block(index: int, raw: str, fmt: ToolCallFormat = HERMES_THINK) -> list[ParsedToolCall]:
    """Every call in one block's text (several for a JSON array), numbered from ``index``."""
    text = raw.strip()
    return [ParsedToolCall(index + i, c.name, c.arguments, text, c.error)
            for i, c in enumerate(fmt.parse_block(text))]


@dataclass
class _Block:
    index: int
    buf: str = ""
    bare: bool = False  # a reply that may be only a JSON call object (see bare_call_head)
    name_sent: bool = False
    args_start: int = -1
    args_sent: int = 0


@dataclass
class StreamingParser:
    """Incremental splitter of reasoning / content / tool calls.

    Args:
        parse_tools: when False, tool-call text is plain content
            (``tool_choice="none"``).
        start_in_reasoning: the prompt already opened ``<think>``.
        fmt: the model's :class:`~loom.orchestrator.formats.ToolCallFormat`
            (default: Hermes ``<tool_call>`` with ``<think>`` reasoning).
        tool_names: the callable tools. When given, a reply that is nothing but a
            JSON object ``{"name": <one of them>, "arguments": {...}}``, possibly in a
            ```` ```json ```` fence (Qwen2.5-Coder often drops the ``<tool_call>``
            tags), is read as a call. Its head is held back only while it can still
            be such a call (:func:`bare_call_head`); then it streams as content.

    Use: ``events = parser.feed(delta)`` for each text delta, then
    ``parser.finish()`` once.  ``parser.state`` is the state after the last
    fed character; the agent uses it to classify each output token.
    """

    parse_tools: bool = True
    start_in_reasoning: bool = False
    fmt: ToolCallFormat = HERMES_THINK
    tool_names: frozenset[str] | None = None
    state: ParserState = "content"
    reasoning: str = ""
    content: str = ""
    calls: list[ParsedToolCall] = field(default_factory=list)
    _pending: str = ""
    _block: _Block | None = None

    def __post_init__(self) -> None:
        if self.start_in_reasoning:
            self.state = "reasoning"

    def _markers(self) -> tuple[str, ...]:
        if self.state == "reasoning":
            return (THINK_CLOSE,)
        if self.state == "tool_call":
            return (self.fmt.call_close,) if self.fmt.call_close else ()
        markers = [THINK_OPEN] if self.fmt.reasoning else []
        if self.parse_tools and not (self.fmt.open_at_start_only and self.content.strip()):
            markers.append(self.fmt.call_open)
        if self._bare_possible():
            markers.extend(m for m in BARE_OPENS if m not in markers)
        if self.parse_tools:
            markers.append(TOOL_RESULT_TAGS[0])  # dropped: see the module docstring
        return tuple(markers)

    def _bare_possible(self) -> bool:
        return bool(self.parse_tools and self.tool_names and not self.calls and not self.content.strip())

    def _find(self, text: str, marker: str) -> int:
        pos = text.find(marker)
        start_only = (marker == self.fmt.call_open and self.fmt.open_at_start_only) or \
            (marker in BARE_OPENS and marker != self.fmt.call_open)
        if pos > 0 and start_only and text[:pos].strip():
            return -1  # a start-only call marker after other text is content
        return pos

    def feed(self, delta: str) -> list[ParserEvent]:
        """Consume one text delta; return the events it completes."""
        events: list[ParserEvent] = []
        text = self._pending + delta
        self._pending = ""
        while text:
            markers = self._markers()
            hits = [(pos, m) for m in markers if (pos := self._find(text, m)) >= 0]
            if hits:
                pos, marker = min(hits)
                self._emit(text[:pos], events)
                self._switch(marker, events)
                text = text[pos + len(marker):]
                continue
            keep = _partial_marker_len(text, markers)
            self._emit(text[: len(text) - keep], events)
            self._pending = text[len(text) - keep:]
            break
        return events

    def finish(self, cut_off: bool = False) -> list[ParserEvent]:
        """Flush held-back text; close a block that runs to the end of the reply (an
        unclosed block of a format with a close marker becomes an error call).

        ``cut_off``: the reply ended at ``max_tokens`` (finish reason ``length``), so an
        unclosed block's error says the call was cut off rather than what its partial
        text lacks (an empty block, JSON ending mid-string).
        """
        events: list[ParserEvent] = []
        text, self._pending = self._pending, ""
        self._emit(text, events)
        if self.state == "tool_call" and self._block is not None and self._block.bare:
            self._finish_bare(events)
        elif self.state == "tool_call" and self._block is not None:
            calls = parse_block(self._block.index, self._block.buf, self.fmt)
            if self.fmt.call_close is not None and (calls[0].error is None or cut_off):
                error = ("tool call was cut off at max_tokens" if cut_off
                         else f"tool call block was not closed with {self.fmt.call_close}")
                calls = [ParsedToolCall(calls[0].index, calls[0].name, calls[0].arguments, calls[0].raw, error)]
            self._finish_block(calls, events)
        return events

    # -- internals -------------------------------------------------------
    def _switch(self, marker: str, events: list[ParserEvent]) -> None:
        if self.state == "reasoning":  # THINK_CLOSE
            self.state = "content"
        elif marker == TOOL_RESULT_TAGS[0] and self.state == "content":
            return  # a copied result wrapper: the tag goes, what it wraps stays content
        elif self.state == "tool_call":  # the format's close marker
            assert self._block is not None
            if _inside_json_string(self._block.buf):  # written inside an argument's string: it is that text
                self._stream_block(marker, events)
                return
            self._finish_block(parse_block(self._block.index, self._block.buf, self.fmt), events)
        elif marker == THINK_OPEN and self.fmt.reasoning:
            self.state = "reasoning"
        elif marker == self.fmt.call_open:
            self.state = "tool_call"
            self._block = _Block(index=len(self.calls))
            if self.fmt.open_in_body:
                self._stream_block(marker, events)
        else:  # a reply that may be a bare call: held while bare_call_head is undecided or True
            self.state = "tool_call"
            self._block = _Block(index=len(self.calls), bare=True)
            self._hold(marker, events)

    def _hold(self, text: str, events: list[ParserEvent]) -> None:
        block = self._block
        assert block is not None
        block.buf += text
        if bare_call_head(block.buf, self.tool_names or frozenset()) is False:
            self._block, self.state = None, "content"
            self._emit(block.buf, events)  # not a call after all: stream it as content

    def _finish_bare(self, events: list[ParserEvent]) -> None:
        block = self._block
        assert block is not None
        fenced = FENCE.match(block.buf)
        call = parse_block(block.index, fenced.group(1) if fenced else block.buf, self.fmt)[0]
        if call.error is None and self.tool_names and call.name in self.tool_names:
            block.bare = False
            self._finish_block([call], events)
            return
        self._block, self.state = None, "content"
        self._emit(block.buf, events)

    def _finish_block(self, calls: list[ParsedToolCall], events: list[ParserEvent]) -> None:
        block = self._block
        assert block is not None
        first = calls[0]
        if block.args_start >= 0 and first.error is None and len(calls) == 1:
            final = block.buf[block.args_start:].rstrip()
            final = final[:-1].rstrip() if final.endswith("}") else final
            if final.startswith(block.buf[block.args_start: block.args_start + block.args_sent]):
                rest = final[block.args_sent:]
                if rest:
                    events.append(ParserEvent("tool_call_delta", index=block.index, arguments_delta=rest))
        for call in calls:
            if call.error is None and (call.index != block.index or block.args_start < 0):
                # never streamed (an array of calls): announce name and arguments now
                events.append(ParserEvent("tool_call_delta", index=call.index, name=call.name))
                events.append(ParserEvent("tool_call_delta", index=call.index,
                                          arguments_delta=json.dumps(call.arguments, ensure_ascii=False)))
            self.calls.append(call)
            events.append(ParserEvent("tool_call", index=call.index, call=call))
        self._block = None
        self.state = "content"

    def _emit(self, text: str, events: list[ParserEvent]) -> None:
        if not text:
            return
        if self.state == "reasoning":
            self.reasoning += text
            events.append(ParserEvent("reasoning", text=text))
        elif self.state == "content":
            self.content += text
            events.append(ParserEvent("content", text=text))
        elif self._block is not None and self._block.bare:
            self._hold(text, events)
        else:
            self._stream_block(text, events)

    def _stream_block(self, text: str, events: list[ParserEvent]) -> None:
        block = self._block
        assert block is not None
        if block.args_start < 0 and not block.buf:
            events.append(ParserEvent("tool_call_delta", index=block.index))
        block.buf += text
        if block.args_start < 0:
            m = _NAME_ARGS.match(block.buf)
            if m is None or m.end() == len(block.buf):  # more whitespace may follow
                return
            block.args_start = m.end()
            name = json.loads(f'"{m.group(1)}"')
            events.append(ParserEvent("tool_call_delta", index=block.index, name=name))
        candidate = block.buf[block.args_start:]
        held = _HOLDBACK.search(candidate)
        assert held is not None  # matches at the end of any string (possibly empty)
        candidate = candidate[: held.start()]
        if len(candidate) > block.args_sent:
            events.append(ParserEvent("tool_call_delta", index=block.index,
                                      arguments_delta=candidate[block.args_sent:]))
            block.args_sent = len(candidate)


def _inside_json_string(text: str) -> bool:
    """Whether ``text``, the start of a JSON document, ends inside a string (an odd number of unescaped quotes).
    A close marker there is string content: SmolLM2's ``</tool_call>`` is plain text, so a forced call's string
    argument may contain it, and ending the call there cut the JSON short (BFCL ``parallel_24``)."""
    inside = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and inside:
            escaped = True
        elif ch == '"':
            inside = not inside
    return inside


def _partial_marker_len(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best
