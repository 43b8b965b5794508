"""vLLM's ``POST /tokenize`` and ``POST /detokenize`` against ``loom serve`` (tiny Qwen3 tokenizer)."""

from __future__ import annotations

import httpx
import pytest

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a city in France."}]


@pytest.fixture(scope="module")
def tok(checkpoint):  # noqa: ANN001, ANN201
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


def test_tokenize_a_prompt_returns_the_tokenizers_ids_count_window_and_token_strings(alice, tok):
    r = alice.post("/tokenize", json={"prompt": "Hello world", "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == tok("Hello world").input_ids and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == 1024  # the shared server's --max-model-len
    assert body["token_strs"] == tok.convert_ids_to_tokens(body["tokens"])
    assert alice.post("/tokenize", json={"prompt": "Hello"}).json()["token_strs"] is None


def test_tokenize_messages_counts_what_a_chat_completion_reports_as_prompt_tokens(alice, openai_client, model_name):
    r = alice.post("/tokenize", json={"model": model_name, "messages": CHAT})
    assert r.status_code == 200, r.text
    chat = openai_client.chat.completions.create(model=model_name, messages=CHAT, max_tokens=1)
    assert r.json()["count"] == chat.usage.prompt_tokens
    bare = alice.post("/tokenize", json={"messages": CHAT, "add_generation_prompt": False}).json()
    assert bare["tokens"] == r.json()["tokens"][:bare["count"]] and bare["count"] < r.json()["count"]


def test_tokenize_of_a_resent_conversation_uses_the_generated_ids_chat_would(alice, openai_client, model_name):
    """The stateless prefix cache keeps a reply's generated ids; /tokenize counts what chat sends the engine."""
    first = openai_client.chat.completions.create(model=model_name, messages=CHAT, max_tokens=12, temperature=1.0,
                                                  seed=3, extra_body={"return_token_ids": True})
    resent = CHAT + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And again?"}]
    tokens = alice.post("/tokenize", json={"messages": resent}).json()["tokens"]
    second = openai_client.chat.completions.create(model=model_name, messages=resent, max_tokens=1,
                                                   extra_body={"return_token_ids": True})
    assert tokens == second.model_dump()["prompt_token_ids"]
    generated = first.model_dump()["choices"][0]["token_ids"]
    prompt = first.model_dump()["prompt_token_ids"]
    assert tokens[:len(prompt) + len(generated)] == prompt + generated


def test_detokenize_inverts_tokenize_of_a_rendered_chat_special_tokens_kept(alice, tok):
    ids = alice.post("/tokenize", json={"messages": CHAT}).json()["tokens"]
    r = alice.post("/detokenize", json={"tokens": ids})
    assert r.status_code == 200, r.text
    text = r.json()["prompt"]
    assert "<|im_start|>" in text and tok(text, add_special_tokens=False).input_ids == ids


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/detokenize", {"tokens": [1, 10**6]}, "tokens.1"),
    ("/detokenize", {"tokens": [-1]}, "tokens.0"),
    ("/tokenize", {"prompt": "x", "messages": CHAT}, "messages"),
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": "x", "model": "nope"}, "model"),
])
def test_bad_tokenize_and_detokenize_requests_are_4xx_naming_the_field(alice, path, body, param):
    r = alice.post(path, json=body)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param


def test_tokenize_needs_an_api_key(server):
    assert httpx.post(server.url + "/tokenize", json={"prompt": "x"}).status_code == 401
