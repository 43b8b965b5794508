"""``parallel_tool_calls`` on ``/v1/chat/completions`` with the real default model (official client)."""

from __future__ import annotations

import json

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of one city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris and in Rome? Call get_weather once per city."}]


def _calls(real_client, **kw):
    r = real_client.chat.completions.create(model="loom", messages=ASK, tools=[WEATHER], tool_choice="required",
                                            max_tokens=120, temperature=0, **kw)
    return r.choices[0].message.tool_calls or [], r.choices[0].finish_reason


def test_required_with_parallel_tool_calls_true_may_return_several_valid_calls(real_client) -> None:
    calls, finish = _calls(real_client, parallel_tool_calls=True)
    assert finish == "tool_calls" and len(calls) >= 1
    for c in calls:
        assert c.function.name == "get_weather" and isinstance(json.loads(c.function.arguments)["city"], str)
    assert len({c.id for c in calls}) == len(calls)
    print(f"parallel_tool_calls=true: {len(calls)} call(s): {[c.function.arguments for c in calls]}")


def test_parallel_tool_calls_false_returns_exactly_one_call(real_client) -> None:
    calls, finish = _calls(real_client, parallel_tool_calls=False)
    assert finish == "tool_calls" and len(calls) == 1
    stream = real_client.chat.completions.create(model="loom", messages=ASK, tools=[WEATHER], tool_choice="required",
                                                 max_tokens=120, temperature=0, parallel_tool_calls=False, stream=True)
    indices = {tc.index for chunk in stream for ch in chunk.choices for tc in (ch.delta.tool_calls or [])}
    assert indices == {0}
