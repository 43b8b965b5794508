"""``GeneratedIds``: a resent conversation gets back the exact ids the model generated.

Uses the real default model's tokenizer (SmolLM2, byte-level BPE, ChatML
template).  A generated reply is spelled with other ids than its text
re-tokenizes to (a word drawn as two tokens), as real decoding often does.
"""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from loom.orchestrator.reuse import GeneratedIds


@pytest.fixture(scope="module")
def tok(real_model):
    return AutoTokenizer.from_pretrained(str(real_model))


def _chat(tok, turns, generation_prompt=True):
    return tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)


def _enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def _generated(tok, reply: str) -> list[int]:
    """Ids for ``reply`` that differ from its canonical tokenization: each word split after its first letter."""
    ids: list[int] = []
    for i, word in enumerate(reply.split(" ")):
        piece = word if i == 0 else " " + word
        cut = 2 if i else 1
        ids += _enc(tok, piece[:cut]) + _enc(tok, piece[cut:]) if len(piece) > cut else _enc(tok, piece)
    return ids + [tok.convert_tokens_to_ids("<|im_end|>")]


def test_resent_reply_keeps_the_generated_ids_where_plain_tokenization_would_not(tok):
    store = GeneratedIds(tok)
    turn1 = [{"role": "system", "content": "You answer questions about the Loom framework."},
             {"role": "user", "content": "What does the scheduler do?"}]
    prompt = store.encode("alice", _chat(tok, turn1)).token_ids
    reply = "The scheduler batches prefill and decode tokens under one budget every step."
    output = _generated(tok, reply)
    assert tok.decode(output[:-1]) == reply and output[:-1] != _enc(tok, reply)
    store.remember("alice", prompt + output)

    turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And preemption?"}]
    text = _chat(tok, turn2)
    got = store.encode("alice", text)
    plain = _enc(tok, text)
    assert got.token_ids[:len(prompt) + len(output)] == prompt + output  # the cache's key: every id kept
    assert got.reused_tokens == len(prompt) + len(output)
    assert tok.decode(got.token_ids) == text  # the model still sees exactly the rendered conversation
    assert plain[:len(prompt) + len(output)] != prompt + output  # what re-tokenizing would have sent


def test_another_owner_never_gets_someone_elses_ids(tok):
    store = GeneratedIds(tok)
    turn1 = [{"role": "user", "content": "Tell me a short fact about caches."}]
    prompt = _enc(tok, _chat(tok, turn1))
    reply = "Caches keep recently used data close to where it is needed."
    store.remember("alice", prompt + _generated(tok, reply))
    text = _chat(tok, turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "More?"}])
    got = store.encode("bob", text)
    assert got.reused_tokens == 0 and got.token_ids == _enc(tok, text)


def test_a_changed_reply_keeps_the_ids_up_to_the_change(tok):
    store = GeneratedIds(tok)
    turn1 = [{"role": "user", "content": "Describe block tables in one sentence, please."}]
    prompt = _enc(tok, _chat(tok, turn1))
    reply = "A block table maps each request's token positions to physical KV blocks in the pool."
    output = _generated(tok, reply)
    store.remember("alice", prompt + output)
    edited = reply.replace("physical KV blocks", "KV blocks")  # the client edited the reply
    text = _chat(tok, turn1 + [{"role": "assistant", "content": edited}, {"role": "user", "content": "ok"}])
    got = store.encode("alice", text)
    assert len(prompt) < got.reused_tokens < len(prompt) + len(output)
    assert got.token_ids[:got.reused_tokens] == (prompt + output)[:got.reused_tokens]
    assert tok.decode(got.token_ids) == text


def test_memory_is_bounded_per_owner_and_in_owners_lru(tok):
    store = GeneratedIds(tok, max_entries=3, max_owners=2)
    for i in range(5):
        store.remember("alice", _enc(tok, f"conversation number {i} " * 4))
    assert store.stats() == {"owners": 1, "sequences": 3}
    store.remember("bob", _enc(tok, "b " * 20))
    store.remember("carol", _enc(tok, "c " * 20))
    assert store.stats() == {"owners": 2, "sequences": 2}  # alice, least recently used, went first
    # a sequence that extends a remembered one replaces it (the next turn covers the last)
    store.remember("carol", _enc(tok, "c " * 20) + _enc(tok, "d " * 5))
    assert store.stats()["sequences"] == 2
