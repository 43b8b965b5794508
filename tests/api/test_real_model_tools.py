"""Tool calls over REST on the real default model, whose tokenizer has no ``<tool_call>``
token and whose chat template cannot render tools (Loom's default format describes them
in the system message): forced calls always come back as ``tool_calls``, never as text,
and a ``max_tokens`` too small for the call says so."""

from __future__ import annotations

import json

SEARCH = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the Python documentation.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "what to look for"}},
                   "required": ["query"]}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "How do I join two paths in Python?"}]


def test_required_tool_choice_returns_a_valid_call_with_a_free_text_argument(real_client):
    r = real_client.chat.completions.create(model="loom", messages=ASK, tools=[SEARCH, WEATHER],
                                            tool_choice="required", max_tokens=200, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.function.name in ("search_docs", "get_weather") and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert isinstance(args.get("query", args.get("city")), str)


def test_named_tool_choice_streams_tool_call_deltas_and_no_content(real_client):
    stream = real_client.chat.completions.create(
        model="loom", messages=ASK, tools=[SEARCH, WEATHER], max_tokens=200, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "search_docs"}})
    name, args, content, finish = "", "", "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            name += tc.function.name or ""
            args += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert name == "search_docs" and finish == "tool_calls" and content == ""
    assert isinstance(json.loads(args)["query"], str)


def test_forced_call_cut_by_max_tokens_is_length_with_an_error_naming_the_budget(real_client):
    r = real_client.chat.completions.create(model="loom", messages=ASK, tools=[SEARCH], tool_choice="required",
                                            max_tokens=6, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert not choice.message.content  # never the half-written call as text
    error = choice.model_extra["error"]
    assert error["param"] == "max_tokens" and "max_tokens=6" in error["message"]
    assert "grammar" not in error["message"].lower() and "lark" not in error["message"].lower()


def test_tools_reach_the_model_through_the_system_message(real_client):
    plain = real_client.chat.completions.create(model="loom", messages=ASK, max_tokens=1, temperature=0)
    with_tools = real_client.chat.completions.create(model="loom", messages=ASK, tools=[SEARCH], max_tokens=1,
                                                     temperature=0)
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 40
