"""Text that is not valid Unicode (a lone surrogate such as ``"\\ud800"``, legal in JSON) is
refused with a 400 naming the field, on every endpoint, and the connection keeps serving."""

from __future__ import annotations

import httpx


def _error(r: httpx.Response) -> dict:
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_lone_surrogate_in_chat_content_is_a_400_and_the_connection_keeps_serving(alice, model_name):
    body = '{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "hi \\ud800"}]}' % model_name
    err = _error(alice.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}))
    assert err["param"] == "messages.0.content" and "surrogate" in err["message"]
    assert "Traceback" not in err["message"]
    ok = alice.post("/v1/chat/completions", json={"model": model_name, "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": "hi 😀"}]})
    assert ok.status_code == 200, ok.text  # same keep-alive connection; a valid pair is fine


def test_lone_surrogate_is_refused_on_sessions_and_documents_too(alice):
    sid = alice.post("/v1/sessions", json={}).json()["id"]
    body = '{"content": "\\udfff"}'
    err = _error(alice.post(f"/v1/sessions/{sid}/messages", content=body, headers={"Content-Type": "application/json"}))
    assert err["param"] == "content"
    err = _error(alice.post("/v1/documents", content='{"id": "d", "text": "a\\ud83d"}',
                            headers={"Content-Type": "application/json"}))
    assert err["param"] == "text"


def test_lone_surrogate_in_a_key_is_a_400_naming_it_escaped_and_the_connection_keeps_serving(alice, model_name):
    body = ('{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}],'
            ' "metadata": {"k\\ud800": "v"}}' % model_name)
    err = _error(alice.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}))
    assert err["param"] == "metadata.k\\ud800" and "surrogate" in err["message"]
    ok = alice.post("/v1/chat/completions", json={"model": model_name, "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200, ok.text


def test_lone_surrogate_escape_in_a_utf16_body_is_a_400_too(alice, model_name):
    """JSON may come in UTF-16, where the escape's bytes differ from UTF-8's: such a body is always parsed."""
    body = '{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "hi \\ud800"}]}' % model_name
    err = _error(alice.post("/v1/chat/completions", content=body.encode("utf-16-le"),
                            headers={"Content-Type": "application/json"}))
    assert err["param"] == "messages.0.content" and "surrogate" in err["message"]
