"""A session turn's stored ledger includes the work done after the answer for the next turn.

When the next turn will not fit the window, the agent compacts after the answer and prefills
the compacted prompt (``loom.orchestrator.compaction_hooks.after_turn``).  That runs after the ``done``
event, so a streamed turn is stored before it; the stored turn is then amended with
``ledger.after_turn``.  Real ``loom serve`` with the real default model (2048-token window).
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.api.server import Server

TOPICS = ["the history of the printing press", "how bridges carry loads", "the water cycle",
          "how vaccines train the immune system", "the life of honeybees", "how compilers work",
          "the formation of volcanoes", "how the stock market works", "the migration of birds",
          "how batteries store energy", "the rules of chess", "how trains are signalled"]


def _message(i: int) -> str:
    # ~420 tokens each: a 2048-token window fills every few turns
    line = f"Here are my notes on {TOPICS[i % len(TOPICS)]}, point {{}}: it matters and I want to learn it. "
    return "".join(line.format(k) for k in range(20)) + "Summarise my notes in one sentence."


@pytest.fixture(scope="module")
def client(real_server: Server):
    with httpx.Client(base_url=real_server.url, timeout=300) as c:
        yield c


def _streamed(c: httpx.Client, sid: str, text: str) -> dict:
    turn = None
    with c.stream("POST", f"/v1/sessions/{sid}/messages", json={"content": text, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                ev = json.loads(line[6:])
                if ev["type"] == "turn":
                    turn = ev["turn"]
    assert turn is not None
    return turn


def test_after_turn_compaction_work_is_in_the_stored_ledger_streamed_or_not(client, real_server) -> None:
    sid = client.post("/v1/sessions", json={"system_prompt": "You are a helpful assistant.",
                                            "sampling": {"max_tokens": 16}}).json()["id"]
    seen = {False: None, True: None}  # stream -> a turn that compacted after its answer
    for i in range(12):
        stream = seen[False] is not None  # plain turns until one compacts, then streamed ones
        if stream:
            turn = _streamed(client, sid, _message(i))
        else:
            r = client.post(f"/v1/sessions/{sid}/messages", json={"content": _message(i)})
            assert r.status_code == 200, r.text
            turn = r.json()
        assert turn["state"] == "done", turn
        after = turn["ledger"].get("after_turn")
        if after is not None:
            seen[stream] = turn
            # the prefill of the compacted prompt: a call of max_tokens=1, not counted in usage
            assert after["num_calls"] >= 1 and after["prompt_tokens"] > 0
            assert turn["usage"]["prompt_tokens"] == turn["ledger"]["prompt_tokens"]
            stored = client.get(f"/v1/sessions/{sid}/messages").json()["data"][-1]
            assert stored["ledger"]["after_turn"] == after
        if seen[True] is not None:
            break
    assert seen[False] is not None and seen[True] is not None, "no turn compacted after its answer"
    # the turn after an after-turn compaction starts on the prefilled, compacted prompt
    nxt = client.post(f"/v1/sessions/{sid}/messages", json={"content": "Thanks."}).json()
    assert nxt["ledger"]["cache_hit_rate"] > 0.5, nxt["ledger"]
    engine = real_server.wait_idle()["engine"]
    assert engine["kv_blocks_free"] == engine["kv_blocks_total"]
