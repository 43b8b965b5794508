"""Sessions over the real agent: CRUD, owner isolation, streaming, interruption."""

from __future__ import annotations

import json

import httpx

SAMPLING = {"temperature": 0.0, "max_tokens": 12}


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def _create(client: httpx.Client, **cfg) -> dict:
    r = client.post("/v1/sessions", json={"system_prompt": "Be brief.", "sampling": SAMPLING, **cfg})
    assert r.status_code == 200, r.text
    return r.json()


def sse_events(response: httpx.Response) -> list:
    """``data:`` payloads of an SSE response (``[DONE]`` kept as a string)."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_session_turn_is_stored_with_its_ledger(alice):
    sess = _create(alice)
    assert sess["object"] == "session" and sess["num_turns"] == 0
    r = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": "Hello there"})
    assert r.status_code == 200, r.text
    turn = r.json()
    assert turn["state"] == "done" and turn["index"] == 0 and turn["user_message"] == "Hello there"
    led, usage = turn["ledger"], turn["usage"]
    assert usage["prompt_tokens"] == led["prompt_tokens"] > 0
    assert usage["completion_tokens"] == led["completion_tokens"] > 0
    assert usage["prompt_tokens_details"]["cached_tokens"] == led["cached_tokens"]
    assert sum(c["tokens"] for c in led["prompt"].values()) == led["prompt_tokens"]
    listed = alice.get(f"/v1/sessions/{sess['id']}/messages").json()["data"]
    assert [t["user_message"] for t in listed] == ["Hello there"] and listed[0]["ledger"] == led
    assert alice.get(f"/v1/sessions/{sess['id']}").json()["num_turns"] == 1


def test_a_turn_cut_at_max_tokens_says_so_in_finish_reason(alice):
    sess = _create(alice)  # the random-weight model never ends before its 12-token cap
    turn = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": "Hello there"}).json()
    assert turn["state"] == "done" and turn["usage"]["completion_tokens"] == SAMPLING["max_tokens"]
    assert turn["finish_reason"] == "length"
    listed = alice.get(f"/v1/sessions/{sess['id']}/messages").json()["data"]
    assert listed[0]["finish_reason"] == "length"


def test_second_turn_reuses_the_first_turns_prefix(alice):
    sess = _create(alice)
    first = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": "One"}).json()
    second = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": "Two"}).json()
    assert second["ledger"]["prompt"]["history"]["tokens"] > 0
    # the second prompt starts with the first prompt: its full blocks come from the prefix cache
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] // 16 * 16


def test_max_history_tokens_caps_the_history_a_turn_is_shown_dropping_the_oldest_turns(alice):
    capped, whole = _create(alice, max_history_tokens=48), _create(alice)
    history = {}
    for sess in (capped, whole):
        for i in range(5):
            turn = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": f"Question number {i}"}).json()
            assert turn["state"] == "done", turn
        history[sess["id"]] = turn["ledger"]["prompt"]["history"]["tokens"]
    assert 0 < history[capped["id"]] <= 48 < history[whole["id"]]  # four earlier turns of ~20 tokens each
    assert _error(alice.post("/v1/sessions", json={"max_history_tokens": 0}), 400)["param"] == "max_history_tokens"


def test_foreign_owner_gets_404_everywhere(alice, bob):
    sess = _create(alice)
    sid = sess["id"]
    assert _error(bob.get(f"/v1/sessions/{sid}"), 404)["type"] == "not_found_error"
    _error(bob.get(f"/v1/sessions/{sid}/messages"), 404)
    _error(bob.post(f"/v1/sessions/{sid}/messages", json={"content": "hi"}), 404)
    _error(bob.delete(f"/v1/sessions/{sid}"), 404)
    assert alice.get(f"/v1/sessions/{sid}").status_code == 200  # untouched
    assert sid in {x["id"] for x in alice.get("/v1/sessions").json()["data"]}
    assert sid not in {x["id"] for x in bob.get("/v1/sessions").json()["data"]}


def test_delete_session_then_404(alice):
    sid = _create(alice)["id"]
    r = alice.delete(f"/v1/sessions/{sid}")
    assert r.json() == {"id": sid, "object": "session", "deleted": True}
    _error(alice.get(f"/v1/sessions/{sid}"), 404)


def test_session_validation_errors_are_400(alice):
    assert _error(alice.post("/v1/sessions", json={"tools": ["rm_rf"]}), 400)["param"].startswith("tools.0")
    assert _error(alice.post("/v1/sessions", json={"sampling": {"temperature": -1}}), 400)["param"] == \
        "sampling.temperature"
    assert _error(alice.post("/v1/sessions", json={"sampling": {"frequency_penalty": 2.5}}), 400)["param"] == \
        "sampling.frequency_penalty"
    assert _error(alice.post("/v1/sessions", json={"sampling": {"repetition_penalty": 0}}), 400)["param"] == \
        "sampling.repetition_penalty"
    sid = _create(alice)["id"]
    assert _error(alice.post(f"/v1/sessions/{sid}/messages", json={"content": ""}), 400)["param"] == "content"
    assert _error(alice.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}), 400)["param"] in ("content", "text")


def test_streamed_turn_sends_agent_events_then_the_stored_turn(alice):
    sid = _create(alice)["id"]
    with alice.stream("POST", f"/v1/sessions/{sid}/messages", json={"content": "Stream please", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    types = [e["type"] for e in events[:-1]]
    assert "usage" in types and types[-2:] == ["done", "turn"]
    turn = events[-2]["turn"]
    assert turn["state"] == "done" and turn["user_message"] == "Stream please"
    streamed = "".join(e.get("text", "") for e in events[:-1] if e["type"] == "content_delta")
    assert streamed.strip() == turn["answer"].strip()


def test_tool_choice_required_session_runs_the_calculator(alice):
    sess = _create(alice, tools=["calculator"], tool_choice="required", max_steps=2,
                   sampling={"temperature": 0.8, "max_tokens": 48, "seed": 7})
    turn = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": "What is 2+3?"}).json()
    assert turn["state"] in ("done", "max_steps"), turn
    assert turn["tool_calls"] and turn["tool_calls"][0]["name"] == "calculator"
    assert len(turn["tool_results"]) >= 1
    assert turn["ledger"]["output"]["tool_call"]["tokens"] > 0


def test_a_message_too_long_for_the_window_is_400_and_stored_nowhere(alice):
    """Refused before anything is stored: no turn row, no history item (a later turn does not reload it)."""
    sid = _create(alice)["id"]
    first = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello."}).json()
    assert first["state"] == "done"
    huge = "word " * 3000  # tokenized and counted: over the 1,024-token window
    enormous = "x" * 3_000_000  # over the character bound: refused without tokenizing
    for content in (huge, enormous):
        for stream in (False, True):
            err = _error(alice.post(f"/v1/sessions/{sid}/messages", json={"content": content, "stream": stream}),
                         400)
            assert err["code"] == "context_length_exceeded" and err["param"] == "content"
    turns = alice.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert [t["user_message"] for t in turns] == ["Hello."]
    ok = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Short one."}).json()
    assert ok["state"] == "done" and ok["usage"]["prompt_tokens"] < 300  # the history holds no refused text


def test_client_gone_during_a_non_streamed_turn_interrupts_it(server, alice):
    # the client hangs up after 0.2 s and the server notices within its 0.25 s disconnect poll: on 2 AVX-512 cores
    # the tiny model wrote all 900 tokens before a 0.5 s hang-up was noticed
    sid = _create(alice, sampling={"temperature": 0.0, "max_tokens": 960})["id"]
    try:
        httpx.post(f"{server.url}/v1/sessions/{sid}/messages", json={"content": "Write forever."},
                   headers=alice.headers, timeout=0.2)
    except httpx.TimeoutException:
        pass
    health = server.wait_idle()
    assert health["engine"]["kv_blocks_free"] == health["engine"]["kv_blocks_total"]
    (turn,) = alice.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert turn["user_message"] == "Write forever."
    if turn["state"] != "interrupted":  # only a reply that ended on its own first may be done
        assert turn["state"] == "done" and turn["usage"]["completion_tokens"] < 960
    else:
        assert turn["error"] == "client disconnected"
    assert "RuntimeError" not in server.log()
