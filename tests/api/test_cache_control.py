"""``cache_control: {"type": "ephemeral", "ttl": ...}`` keeps a call's or a session's KV while other traffic fills
the pool: a real ``loom serve`` (tiny random-weight Qwen3) with a 24-block pool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import Server

KEEP = {"type": "ephemeral", "ttl": "5m"}


@pytest.fixture(scope="module")
def small_pool(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    work = tmp_path_factory.mktemp("cache-control")
    srv = Server(checkpoint, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--max-model-len", "1024",
                 "--num-kv-blocks", "24", "--block-size", "16").start()
    with httpx.Client(base_url=srv.url, timeout=120) as client:
        yield client
    srv.stop()


def _chat(client: httpx.Client, messages: list[dict], **extra: object) -> dict:
    r = client.post("/v1/chat/completions", json={"model": "loom", "messages": messages, "max_tokens": 8,
                                                  "temperature": 0.0, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _flood(client: httpx.Client, tag: str) -> None:
    """Three other conversations of ~170 prompt tokens: together more than the pool holds."""
    for i in range(3):
        _chat(client, [{"role": "user", "content": f"{tag} {i}: " + "many words here " * 40}])


def _follow_up(client: httpx.Client, tag: str, **extra: object) -> tuple[dict, dict]:
    messages = [{"role": "system", "content": f"Conversation {tag}."}, {"role": "user", "content": "Remember 7."}]
    first = _chat(client, messages, **extra)
    _flood(client, tag)
    messages += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "What was it?"}]
    return first, _chat(client, messages, **extra)


def _metric(client: httpx.Client, line_start: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric line {line_start!r}")


def test_a_chat_with_cache_control_finds_its_prefix_after_a_flood_and_one_without_recomputes_it(small_pool):
    evicted_before = _metric(small_pool, 'loom_prefix_cache_miss_tokens_total{reason="evicted"}')
    first, second = _follow_up(small_pool, "kept", cache_control=KEEP)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= \
        first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1
    assert _metric(small_pool, "loom_kv_blocks_pinned") > 0
    first, second = _follow_up(small_pool, "plain")
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] < first["usage"]["prompt_tokens"]
    assert _metric(small_pool, 'loom_prefix_cache_miss_tokens_total{reason="evicted"}') - evicted_before >= 16


def test_a_session_with_cache_control_keeps_its_prefix_between_turns(small_pool):
    sid = small_pool.post("/v1/sessions", json={"system_prompt": "A session that stays.", "cache_control": KEEP,
                                                "sampling": {"temperature": 0.0, "max_tokens": 8}}).json()["id"]
    t1 = small_pool.post(f"/v1/sessions/{sid}/messages", json={"content": "Remember 7."}).json()
    _flood(small_pool, "session")
    t2 = small_pool.post(f"/v1/sessions/{sid}/messages", json={"content": "What was it?"}).json()
    assert t2["usage"]["prompt_tokens_details"]["cached_tokens"] >= \
        t1["usage"]["prompt_tokens"] + t1["usage"]["completion_tokens"] - 1
    assert t2["ledger"]["prompt_misses"].get("evicted", 0) == 0
    assert small_pool.get(f"/v1/sessions/{sid}").json()["config"]["cache_control"] == KEEP


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {"model": "loom", "messages": [{"role": "user", "content": "hi"}],
                              "cache_control": {"type": "ephemeral", "ttl": "5 minutes"}}, "cache_control.ttl"),
    ("/v1/chat/completions", {"model": "loom", "messages": [{"role": "user", "content": "hi"}],
                              "cache_control": {"type": "persistent"}}, "cache_control.type"),
    ("/v1/responses", {"model": "loom", "input": "hi", "cache_control": {"type": "ephemeral", "ttl": "0s"}},
     "cache_control.ttl"),
    ("/v1/sessions", {"cache_control": {"type": "ephemeral", "ttl": "-5m"}}, "cache_control.ttl"),
])
def test_a_malformed_cache_control_is_a_400_naming_the_field(small_pool, path, body, param):
    r = small_pool.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
