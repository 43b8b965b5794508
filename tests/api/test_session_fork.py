"""``POST /v1/sessions/{id}/fork`` on a real ``loom serve`` with the real default model.

The fork's first turn must be served from the prefix cache up to the fork point: its
items are the parent's stored items, token ids included.
"""

from __future__ import annotations

import httpx
import pytest

from tests.api.server import Server


def _turn(c: httpx.Client, sid: str, text: str) -> dict:
    r = c.post(f"/v1/sessions/{sid}/messages", json={"content": text})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def client(real_server: Server):
    with httpx.Client(base_url=real_server.url, timeout=300) as c:
        yield c


@pytest.fixture(scope="module")
def parent(client: httpx.Client) -> tuple[str, list[dict]]:
    r = client.post("/v1/sessions", json={"system_prompt": "You are a helpful assistant. Answer briefly.",
                                          "sampling": {"max_tokens": 24}})
    sid = r.json()["id"]
    turns = [_turn(client, sid, q) for q in ("What is the capital of France?", "And of Italy?",
                                              "And of Spain?")]
    return sid, turns


def test_fork_after_a_turn_is_served_from_the_cache_up_to_the_fork_point(client, parent, real_server) -> None:
    sid, turns = parent
    r = client.post(f"/v1/sessions/{sid}/fork", json={"turn": 2})
    assert r.status_code == 200, r.text
    fork = r.json()
    assert fork["parent_id"] == sid and fork["id"] != sid and fork["num_turns"] == 2
    assert fork["config"]["system_prompt"].startswith("You are a helpful assistant")
    copied = client.get(f"/v1/sessions/{fork['id']}/messages").json()["data"]
    assert [t["user_message"] for t in copied] == ["What is the capital of France?", "And of Italy?"]

    # the fork point's prompt prefix: turn 2's last call's prompt plus its reply
    last = turns[1]["ledger"]["calls"][-1]
    prefix = last["prompt_tokens"] + last["completion_tokens"]
    first = _turn(client, fork["id"], "And of Germany?")["ledger"]["calls"][0]
    print(f"fork point prefix {prefix} tokens; fork first call: {first['cached_tokens']} of {first['prompt_tokens']} prompt tokens cached")
    assert first["cached_tokens"] >= prefix, (first, prefix)  # every token before the fork point
    # the parent is untouched and goes on hitting its own cache
    assert client.get(f"/v1/sessions/{sid}").json()["num_turns"] == 3
    nxt = _turn(client, sid, "And of Portugal?")["ledger"]["calls"][0]
    assert nxt["cached_tokens"] >= turns[2]["ledger"]["calls"][-1]["prompt_tokens"]
    assert len(client.get(f"/v1/sessions/{fork['id']}/messages").json()["data"]) == 3
    engine = real_server.wait_idle()["engine"]
    assert engine["kv_blocks_free"] == engine["kv_blocks_total"]


def test_fork_inside_a_tool_step_is_a_400_naming_at(client) -> None:
    r = client.post("/v1/sessions", json={"tools": ["calculator"], "max_steps": 2, "sampling": {"max_tokens": 32},
                                          "tool_choice": {"type": "function", "function": {"name": "calculator"}}})
    sid = r.json()["id"]
    t = _turn(client, sid, "What is 12 times 7?")
    assert t["tool_calls"], t  # the forced call ran: user, assistant call, tool result, ...
    bad = client.post(f"/v1/sessions/{sid}/fork", json={"at": 2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "at", bad.text
    assert "tool step" in bad.json()["error"]["message"]
    ok = client.post(f"/v1/sessions/{sid}/fork", json={"turn": 1})
    assert ok.status_code == 200 and ok.json()["num_turns"] == 1


@pytest.mark.parametrize("body, param", [({"turn": 9}, "turn"), ({"turn": 1, "at": 1}, "at"),
                                         ({"turn": -1}, "turn"), ({"turn": False}, "turn"),
                                         ({"at": "2"}, "at")])
def test_bad_fork_points_are_400s_naming_the_field(client, parent, body, param) -> None:
    r = client.post(f"/v1/sessions/{parent[0]}/fork", json=body)
    assert r.status_code in (400, 422) and param in r.text, r.text
    assert r.status_code != 500


def test_fork_of_an_unknown_session_is_a_404(client) -> None:
    r = client.post("/v1/sessions/sess_nope/fork", json={})
    assert r.status_code == 404 and r.json()["error"]["param"] == "session_id"
