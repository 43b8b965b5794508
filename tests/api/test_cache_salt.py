"""The prefix cache is shared within one API key only (``--prefix-cache-scope owner``, the default), so one
key holder cannot confirm another's prompt from ``cached_tokens``; a request's ``cache_salt`` splits a key's
cache further.  Against the shared ``loom serve`` on loopback (auth on, owners alice and bob)."""

from __future__ import annotations

import uuid

import httpx

from loom.api.cache_scope import cache_salt


def _secret_prompt(secret: str) -> list[dict]:
    filler = "Notes of the quarterly planning meeting, kept for the record and shared with nobody. " * 6
    return [{"role": "user", "content": f"The vault code is {secret}. {filler}"}]


def _cached(client: httpx.Client, model: str, messages: list[dict], **extra) -> tuple[int, int]:
    r = client.post("/v1/chat/completions", json={"model": model, "messages": messages, "max_tokens": 1,
                                                  "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    return usage["prompt_tokens_details"]["cached_tokens"], usage["prompt_tokens"]


def test_another_key_gets_the_same_cached_count_for_a_right_and_a_wrong_guess(alice, bob, model_name):
    # secrets starting with different letters, so bob's own prompts share exactly the text before them
    secret, warm, guess = (f"{letter}{uuid.uuid4().hex}" for letter in "KQX")
    _cached(alice, model_name, _secret_prompt(secret))
    again, total = _cached(alice, model_name, _secret_prompt(secret))
    assert again >= (total - 1) // 16 * 16 > 0  # within one key, hits are as before
    _cached(bob, model_name, _secret_prompt(warm))  # bob warms his own cache up to the secret
    wrong, _ = _cached(bob, model_name, _secret_prompt(guess))
    right, _ = _cached(bob, model_name, _secret_prompt(secret))
    assert right == wrong < total // 2  # alice's blocks are invisible to bob: only his own prefix hits


def test_a_request_cache_salt_splits_one_keys_cache(alice, model_name):
    secret, one, two = uuid.uuid4().hex, f"tenant-{uuid.uuid4().hex}", f"tenant-{uuid.uuid4().hex}"
    _cached(alice, model_name, _secret_prompt(secret), cache_salt=one)
    same, total = _cached(alice, model_name, _secret_prompt(secret), cache_salt=one)
    other, _ = _cached(alice, model_name, _secret_prompt(secret), cache_salt=two)
    unsalted, _ = _cached(alice, model_name, _secret_prompt(secret))
    assert same >= (total - 1) // 16 * 16 > 0
    assert other == 0  # a salt never used before shares nothing
    assert unsalted < total // 2  # at most the key's own earlier prompts' start, never the salted ones


def test_an_empty_cache_salt_is_a_400_naming_the_field(alice, model_name):
    r = alice.post("/v1/completions", json={"model": model_name, "prompt": "hi", "max_tokens": 1, "cache_salt": ""})
    assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"


def test_the_owner_scope_salts_by_owner_and_the_global_scope_only_by_the_requests_salt():
    assert cache_salt("owner", "alice") != cache_salt("owner", "bob")
    assert cache_salt("owner", "alice", "t") not in (cache_salt("owner", "alice"), cache_salt("owner", "bob", "t"))
    assert cache_salt("owner", "alice") == cache_salt("owner", "alice")
    assert cache_salt("global", "alice") is None and cache_salt("global", "alice", "t") == "t"
