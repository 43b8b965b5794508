"""Turn a Responses request (and the stored conversation it follows) into a chat-completions request.

A response is one model call, so it runs exactly as ``/v1/chat/completions``
does (``loom.api.serving_chat``): same prompt rendering through the model's
chat template, same forced-call and JSON-schema grammars, same parser.  Only
the request and the output change shape:

- ``instructions`` becomes the system message; it is *not* carried to a
  follow-up (OpenAI's rule: a response with ``previous_response_id`` uses its
  own ``instructions`` only).
- ``input`` items become chat messages: a message item as it is, consecutive
  ``function_call`` items as one assistant message's ``tool_calls``, a
  ``function_call_output`` as a ``tool`` message, a ``reasoning`` item as the
  next assistant message's ``reasoning_content``.
- function ``tools`` and ``tool_choice`` take the chat shape (``function``
  nested); ``text.format`` becomes ``response_format``; ``max_output_tokens``
  becomes ``max_tokens``.

The conversation a follow-up continues (``previous_response_id``) is the
chain's messages without instructions, stored with each response
(:func:`conversation_after`).
"""

from __future__ import annotations

import re
from typing import Any

from loom.api.schemas.chat import ChatCompletionRequest
from loom.api.schemas.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    InputText,
    ReasoningItem,
    ResponseCreateRequest,
)
from loom.json_types import JSONObject
from loom.runtime.errors import InvalidRequestError


def _text(content: str | list[InputText]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def input_messages(items: str | list[InputItem], known_calls: set[str] | None = None) -> list[JSONObject]:
    """``input`` as chat messages (OpenAI chat-completions dicts).

    ``known_calls`` holds the call ids of the conversation before ``input``.

    Raises:
        InvalidRequestError: a ``function_call_output`` answers no earlier ``function_call``
            (``param`` is ``input.<i>.call_id``).
    """
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    known = set(known_calls or ())
    out: list[JSONObject] = []
    reasoning = ""  # a reasoning item's text, for the assistant message that follows it
    for i, item in enumerate(items):
        if isinstance(item, ReasoningItem):
            reasoning += "".join(p.text for p in (item.content or item.summary))
            continue
        if isinstance(item, FunctionCallOutputItem):
            if item.call_id not in known:
                raise InvalidRequestError(f"function_call_output answers call_id {item.call_id!r}, which no "
                                          "earlier function_call made", param=f"input.{i}.call_id")
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output)})
            continue
        if isinstance(item, FunctionCallItem):
            known.add(item.call_id)
            if not out or out[-1]["role"] != "assistant" or reasoning:
                out.append({"role": "assistant", "content": None})
            out[-1].setdefault("tool_calls", []).append(
                {"id": item.call_id, "type": "function",
                 "function": {"name": item.name, "arguments": item.arguments}})
        else:
            out.append({"role": item.role, "content": _text(item.content)})
        if reasoning and out[-1]["role"] == "assistant":
            out[-1]["reasoning_content"] = reasoning
        reasoning = ""
    return out


def chat_request(body: ResponseCreateRequest, history: list[JSONObject]) -> tuple[ChatCompletionRequest,
                                                                                  list[JSONObject]]:
    """(the chat-completions request to run, the conversation without instructions).

    ``history`` is the stored conversation of ``previous_response_id`` (empty without one).

    Raises:
        InvalidRequestError: the input holds no message, or a field does not translate (names it).
    """
    earlier = {c["id"] for m in history for c in m.get("tool_calls") or ()}
    conversation = list(history) + input_messages(body.input, earlier)
    if not conversation:
        raise InvalidRequestError("'input' must hold at least one item", param="input")
    messages: list[JSONObject] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    messages += conversation
    chat: dict[str, Any] = {"model": body.model, "messages": messages, "stream": body.stream}
    if body.tools:
        chat["tools"] = [{"type": "function", "function": t.model_dump(exclude_none=True, exclude={"type"})}
                         for t in body.tools]
    if body.tool_choice is not None:
        choice = body.tool_choice
        chat["tool_choice"] = choice if isinstance(choice, str) else {"type": "function",
                                                                       "function": {"name": choice.name}}
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type == "json_schema":
        if fmt.schema_ is None:
            raise InvalidRequestError("text.format of type 'json_schema' needs a 'schema'", param="text.format.schema")
        spec: JSONObject = {"name": fmt.name, "schema": fmt.schema_}
        if fmt.description is not None:
            spec["description"] = fmt.description
        if fmt.strict is not None:
            spec["strict"] = fmt.strict
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif fmt is not None and fmt.type == "json_object":
        chat["response_format"] = {"type": "json_object"}
    for src, dst in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                     ("parallel_tool_calls", "parallel_tool_calls"), ("user", "user"), ("cache_salt", "cache_salt")):
        value = getattr(body, src)
        if value is not None:
            chat[dst] = value
    return ChatCompletionRequest.model_validate(chat, strict=False), conversation


# chat-completions request fields and the Responses fields they come from (first match wins)
_FIELDS = ((re.compile(r"^tool_choice\.function\.name"), "tool_choice.name"),
           (re.compile(r"^tools\.(\d+)\.function\."), r"tools.\1."),
           (re.compile(r"^response_format(\.json_schema)?"), "text.format"),
           (re.compile(r"^max_tokens"), "max_output_tokens"),
           (re.compile(r"^messages(\..*)?$"), "input"))


def responses_param(param: str | None) -> str | None:
    """A chat-completions field name (``max_tokens``, ``response_format...``, ``tools.0.function.x``)
    as the Responses request spells it (``max_output_tokens``, ``text.format...``, ``tools.0.x``);
    ``messages...`` becomes ``input``."""
    if param is None:
        return None
    for pattern, replacement in _FIELDS:
        if pattern.search(param):
            return pattern.sub(replacement, param, count=1)
    return param


def assistant_message(content: str | None, reasoning: str | None,
                      tool_calls: list[tuple[str, str, str]]) -> JSONObject:
    """The chat message a response's output adds to the conversation.

    ``tool_calls`` holds ``(call_id, name, arguments JSON)`` triples.
    """
    message: JSONObject = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                                 for call_id, name, args in tool_calls]
    return message
