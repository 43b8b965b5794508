"""Tool approval over REST (``POST /v1/sessions/{id}/approvals``) on a real ``loom serve`` with the real
default model, including a server killed while a turn waits and restarted on the same database."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import Server

SESSION = {"tools": ["calculator"], "approval": ["calculator"], "max_steps": 3, "sampling": {"max_tokens": 32},
           "tool_choice": {"type": "function", "function": {"name": "calculator"}}}


@pytest.fixture(scope="module")
def server(real_model: Path, real_quantization: str, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("api-approval")
    srv = Server(real_model, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--max-model-len", "2048",
                 "--num-kv-blocks", "256", "--quantization", real_quantization).start()
    yield srv
    srv.kill()


def _pause(c: httpx.Client) -> tuple[str, dict]:
    sid = c.post("/v1/sessions", json=SESSION).json()["id"]
    r = c.post(f"/v1/sessions/{sid}/messages", json={"content": "What is 12 times 7?"})
    assert r.status_code == 200, r.text
    turn = r.json()
    assert turn["state"] == "awaiting_approval" and turn["tool_results"] == []
    assert [p["name"] for p in turn["pending_tool_calls"]] == ["calculator"]
    return sid, turn


def test_paused_turn_refuses_messages_and_bad_decisions_then_resumes(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=300) as c:
        sid, turn = _pause(c)
        cid = turn["pending_tool_calls"][0]["id"]
        busy = c.post(f"/v1/sessions/{sid}/messages", json={"content": "hello?"})
        assert busy.status_code == 409 and cid in busy.json()["error"]["message"]
        bad = c.post(f"/v1/sessions/{sid}/approvals", json={"decisions": [{"tool_call_id": "call_x",
                                                                            "decision": "approve"}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "decisions"
        r = c.post(f"/v1/sessions/{sid}/approvals", json={"decisions": [
            {"tool_call_id": cid, "decision": "edit", "arguments": {"expression": "12 * 7"}}]})
        assert r.status_code == 200, r.text
        done = r.json()
        assert done["state"] in ("done", "max_steps") and done["pending_tool_calls"] == []
        assert done["tool_results"][0]["content"] == "84" and done["tool_calls"][0]["arguments"] == {"expression": "12 * 7"}
        again = c.post(f"/v1/sessions/{sid}/approvals", json={"decisions": [{"tool_call_id": cid,
                                                                              "decision": "approve"}]})
        assert again.status_code == 409
        assert len(c.get(f"/v1/sessions/{sid}/messages").json()["data"]) == 1


def test_reject_reaches_the_model_as_the_tool_result(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=300) as c:
        sid, turn = _pause(c)
        cid = turn["pending_tool_calls"][0]["id"]
        r = c.post(f"/v1/sessions/{sid}/approvals", json={"decisions": [
            {"tool_call_id": cid, "decision": "reject", "reason": "do it by hand"}]})
        res = r.json()["tool_results"][0]
        assert res["is_error"] and res["content"] == "The user rejected this call: do it by hand"


def test_a_turn_waiting_for_approval_survives_a_server_restart(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=300) as c:
        sid, turn = _pause(c)
    server.kill()  # as a crash: nothing is drained
    server.start()
    with httpx.Client(base_url=server.url, timeout=300) as c:
        listed = c.get(f"/v1/sessions/{sid}/messages").json()["data"]
        assert listed[-1]["state"] == "awaiting_approval" and listed[-1]["pending_tool_calls"]
        cid = listed[-1]["pending_tool_calls"][0]["id"]
        r = c.post(f"/v1/sessions/{sid}/approvals", json={"decisions": [
            {"tool_call_id": cid, "decision": "edit", "arguments": {"expression": "6 * 7"}}]})
        assert r.status_code == 200, r.text
        assert r.json()["state"] in ("done", "max_steps") and r.json()["tool_results"][0]["content"] == "42"


def test_client_tool_call_pauses_and_the_clients_output_continues_the_turn(server: Server) -> None:
    lookup = {"type": "function", "function": {"name": "lookup_order", "description": "Status of an order.",
              "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "maxLength": 8,
                                                                         "description": "e.g. A17"}},
                             "required": ["order_id"]}}}
    with httpx.Client(base_url=server.url, timeout=300) as c:
        sid = c.post("/v1/sessions", json={"client_tools": [lookup], "max_steps": 3, "sampling": {"max_tokens": 64},
                                           "tool_choice": {"type": "function",
                                                           "function": {"name": "lookup_order"}}}).json()["id"]
        turn = c.post(f"/v1/sessions/{sid}/messages", json={"content": "Where is my order A17?"}).json()
        assert turn["state"] == "awaiting_approval"
        call = turn["pending_tool_calls"][0]
        assert call["name"] == "lookup_order" and "order_id" in call["arguments"]
        r = c.post(f"/v1/sessions/{sid}/approvals", json={"decisions": [
            {"tool_call_id": call["id"], "decision": "result", "output": "Order A17 shipped on Monday."}]})
        assert r.status_code == 200, r.text
        done = r.json()
        assert done["state"] in ("done", "max_steps")
        assert done["tool_results"][0] == {**done["tool_results"][0], "content": "Order A17 shipped on Monday.",
                                           "is_error": False}
