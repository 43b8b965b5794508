"""Responses input items → chat messages (``loom.api.serving_responses.request``), without a model."""

from __future__ import annotations

import pytest

from loom.api.schemas.responses import ResponseCreateRequest
from loom.api.serving_responses.request import chat_request, input_messages, responses_param
from loom.runtime.errors import InvalidRequestError


def _items(*items: dict) -> list:
    return ResponseCreateRequest.model_validate({"model": "m", "input": list(items)}).input


def test_reasoning_and_function_calls_join_the_assistant_message_that_follows_them():
    messages = input_messages(_items(
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "use the tool"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"a\": 1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sun"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
    ))
    assert messages == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "use the tool", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "w", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sun"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]


def test_an_output_answering_no_call_names_its_item():
    with pytest.raises(InvalidRequestError) as err:
        input_messages(_items({"role": "user", "content": "x"},
                              {"type": "function_call_output", "call_id": "nope", "output": "1"}))
    assert err.value.param == "input.1.call_id"


def test_an_output_may_answer_a_call_of_the_stored_conversation_and_instructions_lead_but_are_not_kept():
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}]
    body = ResponseCreateRequest.model_validate({
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 5,
        "input": [{"type": "function_call_output", "call_id": "c9", "output": "ok"}],
        "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "w"},
        "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}}})
    chat, conversation = chat_request(body, history)
    assert conversation == history + [{"role": "tool", "tool_call_id": "c9", "content": "ok"}]
    assert chat.messages[0].role == "system" and len(chat.messages) == 4
    assert chat.max_tokens == 5 and chat.tool_choice.function.name == "w"
    assert chat.tools[0].function.name == "w" and chat.response_format.json_schema.name == "r"


@pytest.mark.parametrize(("chat", "responses"), [
    ("tool_choice.function.name", "tool_choice.name"), ("tools.2.function.parameters", "tools.2.parameters"),
    ("response_format.json_schema.schema", "text.format.schema"), ("max_tokens", "max_output_tokens"),
    ("messages.3.content", "input"), ("temperature", "temperature")])
def test_chat_field_names_are_given_back_as_the_responses_request_spells_them(chat, responses):
    assert responses_param(chat) == responses
