"""The official ``openai`` client against a real server (tiny random model, real engine)."""

from __future__ import annotations

import json

import jsonschema

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                       "required": ["city"], "additionalProperties": False},
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["tz"], "additionalProperties": False}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_models_lists_the_served_model_first_then_the_embedder(openai_client, model_name):
    ids = [m.id for m in openai_client.models.list().data]
    assert ids == [model_name, "all-MiniLM-L6-v2"]
    assert openai_client.models.retrieve("all-MiniLM-L6-v2").max_model_len == 256
    r = openai_client.chat.completions.create(model="loom", messages=USER, max_tokens=2)
    assert r.model == model_name


def test_non_streaming_completion_has_message_and_exact_usage(openai_client, model_name):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=8, temperature=0, seed=1)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert 0 < u.completion_tokens <= 8
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert 0 <= u.prompt_tokens_details.cached_tokens <= u.prompt_tokens
    assert 0 <= u.completion_tokens_details.reasoning_tokens <= u.completion_tokens


def test_greedy_completion_is_deterministic_and_second_call_hits_prefix_cache(openai_client, model_name):
    msgs = [{"role": "system", "content": "You are a terse assistant. " * 8}, *USER]
    a = openai_client.chat.completions.create(model=model_name, messages=msgs, max_tokens=6, temperature=0)
    b = openai_client.chat.completions.create(model=model_name, messages=msgs, max_tokens=6, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
    # every full KV block of the identical prompt is served from the prefix cache
    assert b.usage.prompt_tokens_details.cached_tokens >= (b.usage.prompt_tokens - 1) // 16 * 16 > 0


def test_streaming_yields_chunks_ending_with_usage(openai_client, model_name):
    stream = openai_client.chat.completions.create(
        model=model_name, messages=USER, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    full = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=8, temperature=0)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == (full.choices[0].message.content or "")
    assert reasoning == (getattr(full.choices[0].message, "reasoning_content", None) or "")
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_stream_without_include_usage_has_no_usage_chunk(openai_client, model_name):
    chunks = list(openai_client.chat.completions.create(
        model=model_name, messages=USER, max_tokens=4, stream=True))
    assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)


def test_tool_choice_required_returns_a_valid_call(openai_client, model_name):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, tools=[WEATHER, CLOCK],
                                              tool_choice="required", max_tokens=64, temperature=1.0, seed=3)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    tool = {"get_weather": WEATHER, "get_time": CLOCK}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])
    assert r.usage.completion_tokens > 0


def test_named_tool_choice_streams_the_named_call(openai_client, model_name):
    chunks = list(openai_client.chat.completions.create(
        model=model_name, messages=USER, tools=[WEATHER, CLOCK], max_tokens=64, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}}))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_time" and deltas[0].id.startswith("call_")
    args = "".join(d.function.arguments or "" for d in deltas)
    jsonschema.validate(json.loads(args), CLOCK["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_result_round_trip_is_accepted(openai_client, model_name):
    msgs = [*USER,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = openai_client.chat.completions.create(model=model_name, messages=msgs, tools=[WEATHER],
                                              tool_choice="none", max_tokens=4)
    assert r.choices[0].message.tool_calls is None
    assert r.usage.prompt_tokens > 0


def test_response_format_json_schema_is_enforced(openai_client, model_name):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
              "maximum": 9}}, "required": ["ok", "n"], "additionalProperties": False}
    r = openai_client.chat.completions.create(
        model=model_name, messages=USER, max_tokens=48, seed=5,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    assert r.choices[0].finish_reason == "stop"


def test_response_format_json_object_gives_an_object(openai_client, model_name):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=64, temperature=0,
                                              response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # a random model may keep writing keys until max_tokens; what it wrote is an object prefix
        assert r.choices[0].message.content.lstrip().startswith("{")


def test_stop_string_ends_the_output_before_it(openai_client, model_name):
    full = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=12, temperature=0)
    text = full.choices[0].message.content or ""
    if len(text) < 4:
        return  # nothing to cut
    stop = text[2:4]
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=12, temperature=0,
                                              stop=[stop])
    assert stop not in (r.choices[0].message.content or "")
    assert r.choices[0].finish_reason == "stop"
