"""Bad input gets the right 4xx and OpenAI's error body, never a 500."""

from __future__ import annotations

import httpx
import openai
import pytest


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


def _chat(model: str, **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}


def test_malformed_json_is_400(alice):
    r = alice.post("/v1/chat/completions", content=b'{"model": "m", "messages": [', headers={
        "content-type": "application/json"})
    err = _error(r, 400)
    assert err["type"] == "invalid_request_error" and "JSON" in err["message"]


@pytest.mark.parametrize(("field", "value", "param"), [
    ("temperature", "hot", "temperature"),
    ("max_tokens", -3, "max_tokens"),
    ("messages", "hello", "messages"),
    ("stream", {"yes": 1}, "stream"),
    ("tool_choice", "sometimes", "tool_choice"),
])
def test_wrong_types_are_400_naming_the_field(alice, model_name, field, value, param):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, **{field: value})), 400)
    assert err["param"] == param or err["param"].startswith(param + "."), err
    assert err["type"] == "invalid_request_error"


def test_unknown_fields_are_accepted_by_default_as_vllm_does(alice, model_name):
    """A client's extra fields (vLLM's habit) are ignored and logged; ``--strict`` makes them 400s
    (tests/api/test_chat_strict.py)."""
    body = _chat(model_name, temprature=0.5, messages=[{"role": "user", "content": "hi", "mood": "sunny"}])
    assert alice.post("/v1/chat/completions", json=body).status_code == 200


def test_a_known_field_with_a_bad_value_stays_a_400_naming_it(alice, model_name):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, temperature="hot")), 400)
    assert err["param"] == "temperature"


def test_empty_messages_is_400(alice, model_name):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, messages=[])), 400)
    assert err["param"] == "messages"


def test_unknown_role_is_400(alice, model_name):
    body = _chat(model_name, messages=[{"role": "robot", "content": "hi"}])
    assert _error(alice.post("/v1/chat/completions", json=body), 400)["param"].startswith("messages.0")


def test_tool_message_without_matching_call_is_400(alice, model_name):
    body = _chat(model_name, messages=[{"role": "user", "content": "hi"},
                                       {"role": "tool", "tool_call_id": "call_x", "content": "42"}])
    err = _error(alice.post("/v1/chat/completions", json=body), 400)
    assert err["param"] == "messages.1.tool_call_id" and "call_x" in err["message"]


def test_tool_choice_required_without_tools_is_400(alice, model_name):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, tool_choice="required")), 400)
    assert err["param"] == "tool_choice"


def test_unknown_model_is_404(alice):
    err = _error(alice.post("/v1/chat/completions", json=_chat("gpt-17")), 404)
    assert err["param"] == "model"


def test_oversize_prompt_is_400_context_length_exceeded(alice, model_name):
    body = _chat(model_name, messages=[{"role": "user", "content": "word " * 3000}])
    err = _error(alice.post("/v1/chat/completions", json=body), 400)
    assert err["code"] == "context_length_exceeded"
    # streaming requests fail the same way, before any event is sent
    err = _error(alice.post("/v1/chat/completions", json={**body, "stream": True}), 400)
    assert err["code"] == "context_length_exceeded"


def test_prompt_plus_max_tokens_over_window_is_400(alice, model_name):
    body = _chat(model_name, messages=[{"role": "user", "content": "word " * 200}], max_tokens=1000)
    assert _error(alice.post("/v1/chat/completions", json=body), 400)["code"] == "context_length_exceeded"


def test_invalid_json_schema_is_400(alice, model_name):
    body = _chat(model_name, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}}})
    err = _error(alice.post("/v1/chat/completions", json=body), 400)
    assert err["param"] == "response_format.json_schema.schema"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, tools=[tool])), 400)
    assert err["param"] == "tools.0.function.parameters"


def test_missing_or_wrong_key_is_401(server, model_name):
    r = httpx.post(server.url + "/v1/chat/completions", json=_chat(model_name))
    assert _error(r, 401)["type"] == "authentication_error"
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer loom-not-a-key"})
    assert _error(r, 401)["code"] == "invalid_api_key"
    r = httpx.get(server.url + "/v1/sessions/sess_x", headers={"Authorization": "Basic abc"})
    _error(r, 401)


def test_openai_client_raises_typed_errors(server, keys, model_name):
    bad = openai.OpenAI(api_key="loom-wrong", base_url=server.url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(api_key=keys["alice"], base_url=server.url + "/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        good.chat.completions.create(model=model_name, messages=[], max_tokens=2)
    assert exc.value.body["param"] == "messages"


def test_unknown_route_is_404_with_openai_body(alice):
    _error(alice.get("/v1/nothing-here"), 404)


def test_unknown_session_is_404(alice):
    err = _error(alice.get("/v1/sessions/sess_doesnotexist"), 404)
    assert err["type"] == "not_found_error"


def test_health_and_metrics_need_no_key(server):
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    assert "loom_time_to_first_token_seconds" in httpx.get(server.url + "/metrics").text


def test_a_stop_of_the_wrong_type_names_stop_not_a_pydantic_union_member(alice, model_name):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, stop=5)), 400)
    assert err["param"] == "stop"
