"""What fuzzing the API from its OpenAPI document found, one test each.

Each was a response the document did not allow, or a request accepted at one
step and failing at a later one.
"""

from __future__ import annotations

import datetime as dt

import httpx
import pytest


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def _chat(model: str, **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}


@pytest.mark.parametrize(("field", "value"), [("stream", 0), ("max_tokens", "5"), ("temperature", "0.5"),
                                              ("stream", "true"), ("n", True)])
def test_a_value_of_another_json_type_is_400_not_coerced(alice, model_name, field, value):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, **{field: value})), 400)
    assert err["param"] == field, err


def test_an_integral_float_is_an_integer_as_json_schema_says(alice, model_name):
    r = alice.post("/v1/chat/completions", json=_chat(model_name, max_tokens=2.0))
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/sessions"])
def test_a_seed_outside_int64_is_400_naming_seed_not_a_torch_overflow(alice, model_name, path):
    big = 2**64
    body = _chat(model_name, seed=big) if path.endswith("completions") else {"sampling": {"seed": big}}
    err = _error(alice.post(path, json=body), 400)
    assert err["param"] in ("seed", "sampling.seed") and "Overflow" not in err["message"], err


def test_a_session_whose_max_tokens_fill_the_window_is_refused_when_created_not_at_every_turn(alice):
    err = _error(alice.post("/v1/sessions", json={"sampling": {"max_tokens": 1024}}), 400)
    assert err["param"] == "sampling.max_tokens" and "1024-token window" in err["message"], err


def test_an_empty_stop_string_is_refused_when_the_session_is_created(alice):
    err = _error(alice.post("/v1/sessions", json={"sampling": {"stop": [""]}}), 400)
    assert err["param"] == "sampling.stop.0", err


def test_param_names_the_field_not_the_union_member_that_failed(alice, model_name):
    err = _error(alice.post("/v1/chat/completions", json=_chat(model_name, tool_choice=5)), 400)
    assert err["param"] == "tool_choice", err
    body = _chat(model_name, messages=[{"role": "user", "content": {"x": 1}}])
    assert _error(alice.post("/v1/chat/completions", json=body), 400)["param"] == "messages.0.user.content"


def test_a_405_allows_every_method_of_the_path_not_only_the_first_routes(alice):
    r = alice.request("PUT", "/v1/sessions")
    _error(r, 405)
    assert r.headers["allow"] == "GET, HEAD, POST"


def test_session_timestamps_carry_their_utc_offset(alice):
    sess = alice.post("/v1/sessions", json={}).json()
    stamp = dt.datetime.fromisoformat(sess["created_at"])
    assert stamp.utcoffset() == dt.timedelta(0), sess["created_at"]


def test_the_openapi_document_declares_every_error_status_with_the_error_body_and_no_422(server):
    spec = httpx.get(server.url + "/openapi.json").json()
    turn = spec["paths"]["/v1/sessions/{session_id}/messages"]["post"]["responses"]
    assert set(turn) == {"200", "400", "401", "404", "409", "429", "503"}
    assert turn["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}
    assert not [(p, m) for p, ops in spec["paths"].items() for m, op in ops.items() if "422" in op["responses"]]
    assert "HTTPValidationError" not in spec["components"]["schemas"]


@pytest.mark.parametrize("text", ["\u00ad", " \n\t ", "\u200b\u200b"])
def test_a_document_with_nothing_to_index_is_400_not_created_then_undeletable(alice, text):
    err = _error(alice.post("/v1/documents", json={"text": text, "id": "blank"}), 400)
    assert err["param"] == "text", err
    assert alice.delete("/v1/documents/blank").status_code == 404


def test_reposting_an_unchanged_document_reports_its_chunks_not_zero(alice):
    body = {"text": "Loom keeps each session's token ids append-only.", "id": "same"}
    first = alice.post("/v1/documents", json=body)
    again = alice.post("/v1/documents", json=body)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["num_chunks"] == first.json()["num_chunks"] >= 1
    assert alice.delete("/v1/documents/same").status_code == 200
