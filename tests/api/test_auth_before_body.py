"""A request without a valid key is refused from its headers, before its body is read.

Before, FastAPI read and parsed the whole body before the key dependency ran:
a 50 MB body without a key took 0.46 s to get a 400 (a parse error) instead of
an immediate 401.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.api.server import Server

BIG = 50 * 1024 * 1024


def _raw_request(server: Server, path: str, headers: dict[str, str], sent: bytes, declared: int) -> bytes:
    """Send headers and only ``sent`` of a ``declared``-byte body, then read the answer (2 s at most)."""
    host, port = "127.0.0.1", server.port
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
             f"Content-Length: {declared}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall("\r\n".join(lines).encode() + sent)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    return answer


def _status_and_body(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head, "no answer before the body was complete: the server waited for it"
    return int(head.split()[1]), json.loads(body[body.index(b"{"):])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer loom-not-a-key"}],
                         ids=["no key", "wrong key"])
def test_a_keyless_request_gets_401_while_its_body_is_still_arriving(server, headers, path):
    # 1 MB of a declared 50 MB body: a server that reads the body first never answers in time
    answer = _raw_request(server, path, headers, b"{" + b" " * (1 << 20), BIG)
    status, body = _status_and_body(answer)
    assert status == 401
    assert body["error"]["type"] == "authentication_error" and body["error"]["code"] == "invalid_api_key"


def test_a_50mb_body_without_a_key_is_refused_with_401_before_it_is_uploaded(server):
    sent = []

    head, tail = b'{"model": "m", "messages": [{"role": "user", "content": "', b'"}]}'

    def body():  # 50 x 1 MB of one JSON document
        yield head
        for _ in range(50):
            sent.append(1)
            yield b"x" * (1 << 20)
        yield tail

    r = httpx.post(server.url + "/v1/sessions/sess_x/messages", content=body(),
                   headers={"content-type": "application/json", "content-length": str(len(head) + BIG + len(tail))}, timeout=30)
    assert r.status_code == 401, r.text[:300]
    assert r.json()["error"]["type"] == "authentication_error"
    assert len(sent) < 50  # the server closed the connection instead of reading the rest (before: all 50 MB
    # were read and parsed, 0.46-0.53 s, then the key was checked)
    assert server.health()["status"] == "ok"


def test_a_valid_key_still_reaches_the_route_and_the_key_is_documented(server, alice):
    assert alice.get("/v1/models").status_code == 200
    spec = httpx.get(server.url + "/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert {"HTTPBearer": []} in spec["paths"]["/v1/models"]["get"]["security"]
