"""``/v1/responses`` with the official ``openai`` client against a real ``loom serve`` (tiny random-weight
Qwen3: shapes, events, storage and the prefix cache, not answer quality)."""

from __future__ import annotations

import json

import openai
import pytest

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_a_text_input_gets_a_response_with_a_message_item_and_usage(openai_client, model_name):
    r = openai_client.responses.create(model=model_name, input="Say hello.", instructions="Be brief.",
                                       max_output_tokens=8, temperature=0.0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model_name
    assert r.status in ("completed", "incomplete")
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 8
    assert r.instructions == "Be brief." and r.max_output_tokens == 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens <= r.usage.input_tokens
    text = [p.text for item in r.output if item.type == "message" for p in item.content]
    assert r.output_text == "".join(text)


def test_a_stored_response_is_retrieved_as_returned_then_deleted(openai_client, model_name, bob):
    r = openai_client.responses.create(model=model_name, input="Count to three.", max_output_tokens=6,
                                       metadata={"run": "7"})
    got = openai_client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump() and got.metadata == {"run": "7"}
    assert bob.get(f"/v1/responses/{r.id}").status_code == 404  # another key's response is not there
    openai_client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as err:
        openai_client.responses.create(model=model_name, input="And on?", previous_response_id=r.id)
    assert err.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(openai_client, model_name):
    r = openai_client.responses.create(model=model_name, input="Hi", max_output_tokens=4, store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(r.id)


def test_a_stream_sends_the_response_events_in_order_and_ends_with_the_stored_response(openai_client, model_name):
    events = list(openai_client.responses.create(model=model_name, input="Tell me a story.", max_output_tokens=12,
                                                 temperature=0.0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert added == [item.id for item in done] == [item.id for item in final.output]
    assert [item.model_dump() for item in done] == [item.model_dump() for item in final.output]
    assert final.usage.output_tokens == 12 or final.status == "completed"
    assert openai_client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_a_function_call_round_trip_continues_from_the_cache(openai_client, model_name):
    first = openai_client.responses.create(model=model_name, input="What is the weather in Paris?",
                                           tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                                           max_output_tokens=64, temperature=0.0)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("fc_")
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    second = openai_client.responses.create(
        model=model_name, previous_response_id=first.id, tools=[WEATHER], max_output_tokens=8, temperature=0.0,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C"}])
    assert second.previous_response_id == first.id
    # the chain's prompt starts with the first call's prompt and every generated id: all but the last
    # sampled token come from the prefix cache
    previous = first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens > previous
    assert second.usage.input_tokens_details.cached_tokens >= previous - 1


def test_the_same_chain_sent_by_hand_as_items_renders_the_same_prompt(openai_client, model_name):
    first = openai_client.responses.create(model=model_name, input="Name a colour.", max_output_tokens=6,
                                           temperature=0.0)
    chained = openai_client.responses.create(model=model_name, previous_response_id=first.id, input="Another one.",
                                             max_output_tokens=4, temperature=0.0, store=False)
    items = [{"role": "user", "content": "Name a colour."}, *[o.model_dump(exclude_none=True) for o in first.output],
             {"role": "user", "content": [{"type": "input_text", "text": "Another one."}]}]
    by_hand = openai_client.responses.create(model=model_name, input=items, max_output_tokens=4, temperature=0.0,
                                             store=False)
    assert by_hand.usage.input_tokens == chained.usage.input_tokens
    assert by_hand.output_text == chained.output_text


def test_text_format_json_schema_constrains_the_output(openai_client, model_name):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    # greedy: sampled at temperature 1, the random-weight model sometimes spent its 32 tokens inside the number
    r = openai_client.responses.create(model=model_name, input="Give a number.", max_output_tokens=32,
                                       temperature=0.0,
                                       text={"format": {"type": "json_schema", "name": "num", "schema": schema}})
    assert r.status == "completed"
    assert isinstance(json.loads(r.output_text)["n"], int)


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}, "input.0.call_id"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"input": "hi", "tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice.name"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"input": []}, "input"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
])
def test_a_bad_request_is_a_400_naming_the_field(alice, model_name, body, param):
    r = alice.post("/v1/responses", json={"model": model_name, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_the_openai_agents_sdk_runs_a_tool_through_loom(server, keys, model_name):
    """An OpenAI Agents SDK agent on Loom's ``/v1/responses``: the forced call reaches the Python tool,
    whose result ends the run (``stop_on_first_tool``)."""
    import agents  # openai-agents (dev extra)
    seen: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather of a city."""
        seen.append(city)
        return f"Sunny in {city}"

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(api_key=keys["alice"], base_url=server.url + "/v1", max_retries=0, timeout=120)
    agent = agents.Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                         model=agents.OpenAIResponsesModel(model=model_name, openai_client=client),
                         model_settings=agents.ModelSettings(tool_choice="required", max_tokens=48, temperature=0.0),
                         tool_use_behavior="stop_on_first_tool")
    result = agents.Runner.run_sync(agent, "What is the weather in Oslo?")
    assert len(seen) == 1 and result.final_output == f"Sunny in {seen[0]}"
