"""A request body over the server's limit (``--max-request-body-bytes``, 8 MiB by default) is a 413 before it
is read whole: from its ``Content-Length`` before a byte arrives, or, chunked, as soon as the count passes the
limit; the server goes on serving."""

from __future__ import annotations

import httpx

from tests.api.server import raw_request, status_and_body

LIMIT = 8 << 20


def test_a_declared_length_over_the_limit_is_413_before_the_body_arrives(server, keys):
    answer = raw_request(server, "/v1/chat/completions", {"Authorization": f"Bearer {keys['alice']}"},
                         b"{", LIMIT + 1)  # one byte of it sent: a server that reads first never answers
    status, body = status_and_body(answer)
    assert status == 413
    assert body["error"]["code"] == "request_too_large" and str(LIMIT) in body["error"]["message"]
    assert server.health()["status"] == "ok"


def test_a_chunked_body_is_counted_and_refused_once_past_the_limit(server, alice, model_name):
    sent = []

    def body():  # 64 x 1 MiB, no Content-Length: chunked
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(64):
            sent.append(1)
            yield b"x" * (1 << 20)
        yield b'"}]}'

    r = alice.post("/v1/chat/completions", content=body(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert len(sent) < 64  # refused mid-upload: the rest was never read
    small = (b'{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}'
             % model_name.encode())
    ok = alice.post("/v1/chat/completions", content=iter([small]), headers={"content-type": "application/json"})
    assert ok.status_code == 200, ok.text  # a chunked body under the limit goes through whole


def test_a_prompt_longer_than_the_window_could_hold_is_a_400_without_tokenizing(alice, model_name):
    r = alice.post("/v1/chat/completions", json={"model": model_name, "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": "y" * 6_000_000}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    r = alice.post("/v1/completions", json={"model": model_name, "max_tokens": 2, "prompt": "y" * 6_000_000})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert httpx.get(alice.base_url.join("/health")).status_code == 200
