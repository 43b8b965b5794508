"""A ``response_format`` the grammar engine cannot serve is a 400 naming the field, alone.

Before: ``{"$ref": "#"}`` compiled, then failed inside the shared engine step:
7 of 8 innocent concurrent requests got 500, and every error body carried
the grammar engine's state dump; other uncompilable schemas were 400s naming
the engine's own parameter ``structured_output``.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.api.server import Server


def _rf(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _clean(err: dict) -> None:
    assert set(err) == {"message", "type", "param", "code"}
    for internal in ("structured_output", "<state>", "Parser", "grm_prefix", "\n", "Traceback"):
        assert internal not in err["message"], err


@pytest.mark.parametrize(("schema", "reason"), [
    ({"$ref": "#"}, "admits no output"),
    ({"type": "string", "format": "nonsense"}, "Unknown format"),
    ({"type": "string", "pattern": "(?=a)b"}, "regex"),  # the runtime keeps only "regex parse error:"
    ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
    ({"$ref": "#/definitions/missing"}, "/definitions/missing"),
], ids=["self-ref", "unknown-format", "lookaround-regex", "empty-length-range", "dangling-ref"])
def test_an_uncompilable_response_format_is_400_naming_response_format_not_the_engine(
        alice, model_name, schema, reason):
    r = alice.post("/v1/chat/completions", json={
        "model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "response_format": _rf(schema)})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    _clean(err)
    assert err["param"] == "response_format" and err["type"] == "invalid_request_error"
    assert reason in err["message"], err


def test_an_uncompilable_response_format_is_400_in_a_stream_too(alice, model_name):
    r = alice.post("/v1/chat/completions", json={
        "model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "stream": True, "response_format": _rf({"$ref": "#"})})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "response_format"


async def _bad_among_eight(server: Server, key: str, model: str, schema: dict) -> tuple[httpx.Response, list]:
    headers = {"Authorization": f"Bearer {key}"}
    good = {"model": model, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 160,
            "temperature": 0}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120) as c:
        innocents = [asyncio.ensure_future(c.post("/v1/chat/completions", json=good)) for _ in range(8)]
        while (await c.get("/health")).json()["engine"]["num_running"] < 4:  # the batch is running
            await asyncio.sleep(0.01)
        bad = await c.post("/v1/chat/completions", json={**good, "response_format": _rf(schema)})
        return bad, await asyncio.gather(*innocents)


@pytest.mark.parametrize(("schema", "statuses"), [
    ({"$ref": "#"}, {400}),  # refused at submission
    # compiles, then dead-ends mid-output: the runtime names its own constraint at fault
    ({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]}, {400}),
], ids=["fails-at-submission", "fails-mid-generation"])
def test_a_request_whose_schema_cannot_be_served_fails_alone_and_8_concurrent_requests_succeed(
        server, keys, model_name, schema, statuses):
    bad, innocents = asyncio.run(_bad_among_eight(server, keys["alice"], model_name, schema))
    assert [r.status_code for r in innocents] == [200] * 8, [r.text[:200] for r in innocents]
    for r in innocents:
        assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert bad.status_code in statuses, bad.text
    _clean(bad.json()["error"])
    health = server.wait_idle()
    assert health["engine"]["kv_blocks_free"] == health["engine"]["kv_blocks_total"]


def test_a_schema_that_requires_infinite_nesting_is_a_400_naming_response_format(alice, model_name):
    r = alice.post("/v1/chat/completions", json={
        "model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64,
        "response_format": _rf({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}},
                                "required": ["a"]})})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text


def test_a_self_referencing_tool_schema_in_a_forced_call_is_a_400_naming_tools(alice, model_name):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}}}]
    r = alice.post("/v1/chat/completions", json={
        "model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64,
        "tools": tools, "tool_choice": "required"})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("tools"), r.text


def test_a_forced_call_of_a_pydantic_tool_with_defs_writes_arguments_its_model_accepts(openai_client, model_name):
    """``openai.pydantic_function_tool`` writes ``$defs`` and ``$ref``s; a forced call of it compiles (no 400
    about grammar pointers) and the arguments validate with the Pydantic model itself."""
    import openai

    from tests.pydantic_models import Customer

    tool = openai.pydantic_function_tool(Customer)
    assert "$defs" in tool["function"]["parameters"]
    r = openai_client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Add a customer."}], tools=[tool],
        tool_choice={"type": "function", "function": {"name": "Customer"}}, max_tokens=400, temperature=0)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "Customer"
    Customer.model_validate_json(call.function.arguments)
