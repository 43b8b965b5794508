"""``loom serve --otlp-traces-endpoint``: a session turn's OpenTelemetry spans reach an OTLP/HTTP receiver (a real
``loom serve`` on loopback, the real OTLP exporter, spans decoded with OpenTelemetry's own protobufs), their usage
equal to the turn's; a chat completion is a span of its own with the response's usage."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.api.server import Server, free_port


class _Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP traces receiver: keeps every span it is sent, with its attributes as plain values."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attrs = {a.key: _value(a.value) for a in span.attributes}
                            receiver.spans.append((span.name, attrs))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)


def _value(v):  # an OTLP AnyValue as Python
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind)


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    rec = _Receiver()
    thread = threading.Thread(target=rec.serve_forever, daemon=True)
    thread.start()
    yield rec
    rec.shutdown()


def test_a_session_turn_exports_its_spans_with_the_turns_usage(checkpoint, tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the batch processor's export interval (ms)
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    srv = Server(checkpoint, f"sqlite:///{tmp_path / 'loom.db'}", tmp_path, "--no-auth", "--max-model-len", "1024",
                 "--num-kv-blocks", "256", "--otlp-traces-endpoint", endpoint).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            sid = c.post("/v1/sessions", json={"system_prompt": "Be brief.",
                                               "sampling": {"temperature": 0.0, "max_tokens": 8}}).json()["id"]
            turn = c.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello"}).json()
            model = c.get("/v1/models").json()["data"][0]["id"]
            completion = c.post("/v1/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}).json()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (any(n.startswith("invoke_agent") for n, _ in receiver.spans)
                                                   and any(a.get("gen_ai.response.id") for _, a in receiver.spans)):
            time.sleep(0.1)
    finally:
        srv.stop()
    agents = [a for n, a in receiver.spans if n.startswith("invoke_agent")]
    chats = [a for n, a in receiver.spans if n.startswith("chat ")]
    assert len(agents) == 1 and chats, receiver.spans
    turn_chats = [a for a in chats if "gen_ai.response.id" not in a]
    (agent,) = agents
    assert agent["gen_ai.conversation.id"] == sid and agent["gen_ai.operation.name"] == "invoke_agent"
    usage = turn["usage"]
    assert agent["gen_ai.usage.input_tokens"] == usage["prompt_tokens"] == sum(
        c["gen_ai.usage.input_tokens"] for c in turn_chats)
    assert agent["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert agent["gen_ai.usage.cache_read.input_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]
    assert agent["loom.tokens.user.computed"] > 0 and turn_chats[0]["gen_ai.request.max_tokens"] == 8
    # a stateless chat completion is a chat span of its own, with the response's id and usage
    (api,) = [a for a in chats if a.get("gen_ai.response.id") == completion["id"]]
    u = completion["usage"]
    assert (api["gen_ai.usage.input_tokens"], api["gen_ai.usage.output_tokens"]) == (u["prompt_tokens"],
                                                                                   u["completion_tokens"])
    assert api["gen_ai.request.max_tokens"] == 5 and api["gen_ai.response.finish_reasons"] == ("length",)
