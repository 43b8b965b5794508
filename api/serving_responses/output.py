"""Shape a finished (or streaming) chat completion as a Responses API ``response``.

The output of one model call becomes ``output`` items in this order: the
reasoning (``reasoning`` item, its text a ``reasoning_text`` part), the reply
(``message`` item with one ``output_text`` part) when it has text, then one
``function_call`` item per tool call, whose ``call_id`` is the id the chat
shape gives the call.  A reply cut at ``max_output_tokens`` makes the response
``incomplete`` with ``incomplete_details.reason = "max_output_tokens"``.

Streaming (:class:`ResponseEvents`) turns the chat deltas into the Responses
event sequence, every event with a ``sequence_number``:
``response.created``, ``response.in_progress``, then per item
``response.output_item.added`` → (``response.content_part.added`` →
``response.output_text.delta``… → ``response.output_text.done`` →
``response.content_part.done`` | ``response.reasoning_text.delta``… →
``response.reasoning_text.done`` | ``response.function_call_arguments.delta``…
→ ``response.function_call_arguments.done``) → ``response.output_item.done``,
and last ``response.completed`` (or ``response.incomplete``) carrying the whole
response.  The streamed items keep their ids in the final response.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from loom.api.schemas.chat import Delta, FinishReason, ResponseMessage, Usage
from loom.api.schemas.responses import (
    IncompleteDetails,
    InputTokensDetails,
    OutputFunctionCall,
    OutputItem,
    OutputMessage,
    OutputReasoning,
    OutputText,
    OutputTokensDetails,
    ResponseObject,
    ResponseUsage,
)
from loom.json_types import JSONObject


def new_id(prefix: str) -> str:
    """``<prefix>_<32 hex>`` (``resp``, ``msg``, ``fc``, ``rs``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass
class ItemIds:
    """The ids of one response's output items, made on first use (a stream and its final response share them)."""

    reasoning: str = field(default_factory=lambda: new_id("rs"))
    message: str = field(default_factory=lambda: new_id("msg"))
    calls: dict[str, str] = field(default_factory=dict)  # call_id -> item id

    def call(self, call_id: str) -> str:
        return self.calls.setdefault(call_id, new_id("fc"))


def response_usage(usage: Usage) -> ResponseUsage:
    """Chat usage in the Responses names (``input_tokens`` includes the cached ones)."""
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.prompt_tokens_details.cached_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.completion_tokens_details.reasoning_tokens),
        total_tokens=usage.total_tokens)


def output_items(message: ResponseMessage, finish_reason: FinishReason, ids: ItemIds) -> list[OutputItem]:
    """The ``output`` of a finished reply."""
    status: Literal["completed", "incomplete"] = "incomplete" if finish_reason == "length" else "completed"
    items: list[OutputItem] = []
    if message.reasoning_content:
        items.append(reasoning_item(ids.reasoning, message.reasoning_content))
    if message.content:
        items.append(OutputMessage(id=ids.message, status=status, content=[OutputText(text=message.content)]))
    for call in message.tool_calls or []:
        items.append(OutputFunctionCall(id=ids.call(call.id), call_id=call.id, name=call.function.name,
                                        arguments=call.function.arguments))
    return items


def reasoning_item(item_id: str, text: str | None) -> OutputReasoning:
    """A reasoning item (``text`` ``None``: just opened, no part yet)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return OutputReasoning(id=item_id, content=content)


def finished_status(finish_reason: FinishReason) -> tuple[Literal["completed", "incomplete"],
                                                          IncompleteDetails | None]:
    """(``status``, ``incomplete_details``) of a response whose reply ended for ``finish_reason``."""
    if finish_reason == "length":
        return "incomplete", IncompleteDetails(reason="max_output_tokens")
    return "completed", None


@dataclass
class _Open:
    kind: str  # "reasoning" | "message" | "call"
    index: int  # output_index
    item_id: str
    text: str = ""
    call_id: str = ""
    name: str = ""


class ResponseEvents:
    """Chat stream deltas → Responses stream events (dicts with ``type`` and ``sequence_number``).

    ``start()`` opens the stream, ``delta(d)`` maps one chat ``Delta``, ``finish(response)``
    closes the open items and ends with ``response.completed`` / ``response.incomplete``.
    """

    def __init__(self, skeleton: ResponseObject, ids: ItemIds) -> None:
        self.skeleton, self.ids = skeleton, ids
        self.seq = 0
        self.items: list[_Open] = []
        self._open: _Open | None = None
        self._calls: dict[int, _Open] = {}  # chat tool-call index -> its item

    def _event(self, kind: str, **fields: Any) -> JSONObject:
        event: JSONObject = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def start(self) -> list[JSONObject]:
        """``response.created`` and ``response.in_progress``."""
        body = self.skeleton.model_dump(mode="json")
        return [self._event("response.created", response=body), self._event("response.in_progress", response=body)]

    def _switch(self, kind: str, item_id: str, **extra: Any) -> list[JSONObject]:
        """Close the open item unless it is ``item_id``; open ``item_id`` when it is new."""
        if self._open is not None and self._open.item_id == item_id:
            return []
        events = self._close()
        item = _Open(kind, len(self.items), item_id, **extra)
        self.items.append(item)
        self._open = item
        events.append(self._event("response.output_item.added", output_index=item.index, item=self._item(item, True)))
        if kind == "message":
            events.append(self._event("response.content_part.added", item_id=item_id, output_index=item.index,
                                      content_index=0, part=OutputText(text="").model_dump()))
        return events

    def _item(self, item: _Open, in_progress: bool) -> JSONObject:
        status: Literal["in_progress", "completed"] = "in_progress" if in_progress else "completed"
        if item.kind == "reasoning":
            return reasoning_item(item.item_id, None if in_progress else item.text).model_dump()
        if item.kind == "message":
            parts = [] if in_progress else [OutputText(text=item.text)]
            return OutputMessage(id=item.item_id, status=status, content=parts).model_dump()
        return OutputFunctionCall(id=item.item_id, call_id=item.call_id, name=item.name,
                                  arguments="" if in_progress else item.text, status=status).model_dump()

    def _close(self, final: dict[str, JSONObject] | None = None) -> list[JSONObject]:
        """The closing events of the open item (``final``: the finished response's items by id)."""
        item, self._open = self._open, None
        if item is None:
            return []
        where = {"item_id": item.item_id, "output_index": item.index}
        if item.kind == "reasoning":
            events = [self._event("response.reasoning_text.done", **where, content_index=0, text=item.text)]
        elif item.kind == "message":
            events = [self._event("response.output_text.done", **where, content_index=0, text=item.text, logprobs=[]),
                      self._event("response.content_part.done", **where, content_index=0,
                                  part=OutputText(text=item.text).model_dump())]
        else:
            events = [self._event("response.function_call_arguments.done", **where, name=item.name,
                                  arguments=item.text)]
        done = (final or {}).get(item.item_id) or self._item(item, False)
        events.append(self._event("response.output_item.done", output_index=item.index, item=done))
        return events

    def delta(self, delta: Delta) -> list[JSONObject]:
        """The events of one chat delta (reasoning, then content, then tool calls)."""
        events: list[JSONObject] = []
        if delta.reasoning_content:
            events += self._switch("reasoning", self.ids.reasoning)
            assert self._open is not None
            self._open.text += delta.reasoning_content
            events.append(self._event("response.reasoning_text.delta", item_id=self._open.item_id,
                                      output_index=self._open.index, content_index=0, delta=delta.reasoning_content))
        if delta.content:
            events += self._switch("message", self.ids.message)
            assert self._open is not None
            self._open.text += delta.content
            events.append(self._event("response.output_text.delta", item_id=self._open.item_id,
                                      output_index=self._open.index, content_index=0, delta=delta.content,
                                      logprobs=[]))
        for call in delta.tool_calls or []:
            if call.id is not None:  # a new call: its id and name come first
                events += self._switch("call", self.ids.call(call.id), call_id=call.id,
                                       name=call.function.name or "")
                assert self._open is not None
                self._calls[call.index] = self._open
            item = self._calls.get(call.index)
            if item is not None and call.function.arguments:
                item.text += call.function.arguments
                events.append(self._event("response.function_call_arguments.delta", item_id=item.item_id,
                                          output_index=item.index, delta=call.function.arguments))
        return events

    def finish(self, response: ResponseObject) -> list[JSONObject]:
        """Close the open item, then ``response.completed`` / ``response.incomplete`` with ``response``."""
        kind = "response.incomplete" if response.status == "incomplete" else "response.completed"
        body = response.model_dump(mode="json")
        final = {item["id"]: item for item in body["output"]}
        return self._close(final) + [self._event(kind, response=body)]
