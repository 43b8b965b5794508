"""vLLM / OpenAI chat-completion fields through the official ``openai`` client against ``loom serve``.

Tiny random-weight Qwen3 (shapes and exact mechanics: seeds, biases, stop
tokens, constraints); each test states what it proves in its name.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import jsonschema
import openai
import pytest

from tests.api.server import hang_up_midway

USER = [{"role": "user", "content": "Name a city."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
    "required": ["city"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def tok(checkpoint):  # noqa: ANN001, ANN201
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


def _bad(call, param: str) -> str:  # noqa: ANN001
    with pytest.raises(openai.BadRequestError) as info:
        call()
    err = info.value.body
    assert err["param"] == param, err
    assert "Traceback" not in err["message"] and "start:" not in err["message"], err
    return err["message"]


# -- logprobs -------------------------------------------------------------------------------
def test_logprobs_one_entry_per_output_token_with_sorted_top_logprobs_and_greedy_token_first(
        openai_client, model_name):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=6, temperature=0,
                                              logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and tops[0] <= 0
        # greedy takes the argmax of the raw logits: the sampled token is the most likely one
        assert entry.top_logprobs[0].token == entry.token and entry.logprob == pytest.approx(tops[0])
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token or "\ufffd" in entry.token


def test_logprob_bytes_of_tokens_splitting_characters_join_to_the_exact_utf8_text(openai_client, model_name, tok):
    r = openai_client.chat.completions.create(
        model=model_name, messages=USER, max_tokens=12, temperature=0, logprobs=True, top_logprobs=0,
        extra_body={"guided_regex": "(héllo|日本) [a-z]{2,6}"})
    content, text = r.choices[0].logprobs.content, r.choices[0].message.content
    assert all(e.top_logprobs == [] for e in content)
    joined = b"".join(bytes(e.bytes) for e in content).decode("utf-8")  # strict: no partial character left
    assert joined in (text, text + tok.eos_token)  # the eos token, when it ended the reply, is a token too
    assert any("\ufffd" in e.token for e in content)  # a token holding part of é / 日 shows U+FFFD as text


def test_streamed_logprobs_cover_every_token_once_equal_to_the_non_streamed_ones(openai_client, model_name):
    kw = dict(model=model_name, messages=USER, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    whole = openai_client.chat.completions.create(**kw).choices[0].logprobs.content
    chunks = list(openai_client.chat.completions.create(**kw, stream=True))
    streamed = [e for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content]
    assert [(e.token, e.bytes) for e in streamed] == [(e.token, e.bytes) for e in whole]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole], abs=1e-4)


def test_top_logprobs_out_of_range_or_without_logprobs_is_400_naming_top_logprobs(openai_client, model_name):
    kw = dict(model=model_name, messages=USER, max_tokens=2)
    _bad(lambda: openai_client.chat.completions.create(**kw, logprobs=True, top_logprobs=21), "top_logprobs")
    msg = _bad(lambda: openai_client.chat.completions.create(**kw, top_logprobs=2), "top_logprobs")
    assert "logprobs" in msg


# -- n --------------------------------------------------------------------------------------
def _health(server) -> dict:  # noqa: ANN001
    return server.wait_idle()["engine"]


def test_n_choices_use_seed_plus_index_share_the_prompt_blocks_and_sum_completion_usage(
        openai_client, model_name, server):
    system = {"role": "system", "content": f"{uuid.uuid4().hex} You answer in one word. " * 6}
    msgs = [system, *USER]
    before = _health(server)
    r = openai_client.chat.completions.create(model=model_name, messages=msgs, n=3, seed=7, temperature=1.0,
                                              max_tokens=5, logprobs=True)
    after = _health(server)
    assert [c.index for c in r.choices] == [0, 1, 2]
    lengths = [len(c.logprobs.content) for c in r.choices]
    assert r.usage.completion_tokens == sum(lengths)
    one = openai_client.chat.completions.create(model=model_name, messages=msgs, seed=8, temperature=1.0,
                                                max_tokens=5)
    assert r.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once
    assert r.choices[1].message.content == one.choices[0].message.content  # child 1 samples with seed 7 + 1
    # children 1 and 2 take from the cache every full block before the prompt's last token (child 0
    # computed them); the last token is always computed, so a prompt of 240 tokens shares 224, not 240
    full = (r.usage.prompt_tokens - 1) // 16 * 16
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] >= 2 * full > 0
    assert after["kv_blocks_free"] == after["kv_blocks_total"]


def test_n_streamed_interleaves_indexed_chunks_equal_to_the_non_streamed_choices(openai_client, model_name):
    kw = dict(model=model_name, messages=USER, n=3, seed=11, temperature=1.0, max_tokens=6)
    whole = openai_client.chat.completions.create(**kw)
    chunks = list(openai_client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = {i: "" for i in range(3)}
    finishes = {}
    for c in chunks[:-1]:
        (ch,) = c.choices
        text[ch.index] += ch.delta.content or ""
        if ch.finish_reason:
            finishes[ch.index] = ch.finish_reason
    assert text == {c.index: c.message.content for c in whole.choices}
    assert finishes == {c.index: c.finish_reason for c in whole.choices}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.parametrize("stream", [True, False])
def test_n_client_hanging_up_midway_aborts_every_child_and_frees_all_kv_blocks(server, keys, model_name, stream):
    body = {"model": model_name, "messages": USER, "n": 8, "max_tokens": 1000, "ignore_eos": True}
    before, h = hang_up_midway(server, keys["alice"], "/v1/chat/completions", body, stream)
    assert h["kv_blocks_free"] == h["kv_blocks_total"]
    # aborted: far fewer tokens than the 8 x 1000 the children would have generated
    assert h["num_generated_tokens"] - before["num_generated_tokens"] < 4000


def test_n_above_the_cap_is_400_naming_n(openai_client, model_name):
    _bad(lambda: openai_client.chat.completions.create(model=model_name, messages=USER, n=129), "n")


def test_forced_tool_calls_of_n_choices_have_unique_call_ids(openai_client, model_name):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, tools=[WEATHER], n=3,
                                              tool_choice="required", max_tokens=40, temperature=1.0, seed=3)
    ids = [call.id for c in r.choices for call in c.message.tool_calls]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids)


# -- logit_bias / min_tokens ----------------------------------------------------------------
def test_logit_bias_plus_100_makes_greedy_output_that_token(openai_client, model_name, tok):
    (paris,) = tok.encode(" the", add_special_tokens=False)
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=4, temperature=0,
                                              logit_bias={str(paris): 100})
    assert r.choices[0].message.content == " the" * 4


def test_logit_bias_bad_key_or_value_is_400_naming_logit_bias(openai_client, model_name):
    kw = dict(model=model_name, messages=USER, max_tokens=2)
    _bad(lambda: openai_client.chat.completions.create(**kw, logit_bias={"abc": 1}), "logit_bias")
    _bad(lambda: openai_client.chat.completions.create(**kw, logit_bias={"99999999": 1}), "logit_bias")
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(**kw, logit_bias={"5": 101})
    assert info.value.body["param"].startswith("logit_bias")


def test_min_tokens_holds_back_a_stop_token_the_bias_makes_certain(openai_client, model_name, tok):
    (stop,) = tok.encode(" the", add_special_tokens=False)
    kw = dict(model=model_name, messages=USER, max_tokens=10, temperature=0, logit_bias={str(stop): 100},
              extra_body={"stop_token_ids": [stop]})
    short = openai_client.chat.completions.create(**kw)
    assert (short.usage.completion_tokens, short.choices[0].finish_reason) == (1, "stop")
    kw["extra_body"] = {"stop_token_ids": [stop], "min_tokens": 5}
    held = openai_client.chat.completions.create(**kw)
    assert (held.usage.completion_tokens, held.choices[0].finish_reason) == (6, "stop")


# -- chat_template_kwargs / continuous usage --------------------------------------------------
def test_chat_template_kwargs_reach_the_template_enable_thinking_false_adds_the_empty_think_block(
        openai_client, model_name):
    kw = dict(model=model_name, messages=USER, max_tokens=1)
    plain = openai_client.chat.completions.create(**kw)
    off = openai_client.chat.completions.create(**kw, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens > plain.usage.prompt_tokens  # "<think>\n\n</think>\n\n" appended
    _bad(lambda: openai_client.chat.completions.create(**kw, extra_body={"chat_template_kwargs": {"tokenize": True}}),
         "chat_template_kwargs.tokenize")


def test_continuous_usage_stats_puts_growing_cumulative_usage_on_every_chunk(openai_client, model_name):
    chunks = list(openai_client.chat.completions.create(
        model=model_name, messages=USER, max_tokens=6, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in chunks]
    assert all(c.usage is not None for c in chunks)
    assert counts == sorted(counts) and counts[-1] == chunks[-1].usage.total_tokens - chunks[-1].usage.prompt_tokens
    assert counts[-1] == counts[-2]  # the final usage chunk equals the last choice chunk's running total


# -- structured outputs ---------------------------------------------------------------------
@pytest.mark.parametrize("extra", [
    {"structured_outputs": {"choice": ["yes", 'say "no"', "日本"]}},
    {"guided_choice": ["yes", 'say "no"', "日本"]},
])
def test_choice_constraint_outputs_exactly_one_of_the_choices(openai_client, model_name, extra):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=10, extra_body=extra)
    assert r.choices[0].message.content in ("yes", 'say "no"', "日本")


@pytest.mark.parametrize("extra", [{"guided_regex": "[A-Z][a-z]{2,5}-[0-9]{2}"},
                                   {"structured_outputs": {"regex": "[A-Z][a-z]{2,5}-[0-9]{2}"}}])
def test_regex_constraint_output_matches_it_whole(openai_client, model_name, extra):
    r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=12, extra_body=extra)
    assert re.fullmatch(r"[A-Z][a-z]{2,5}-[0-9]{2}", r.choices[0].message.content)


def test_json_and_lark_grammar_constraints_hold(openai_client, model_name):
    # a boolean: every document the schema allows fits in max_tokens (a random model's integer may not end)
    schema = {"type": "object", "properties": {"n": {"type": "boolean"}}, "required": ["n"],
              "additionalProperties": False}
    for extra in ({"guided_json": schema}, {"structured_outputs": {"json": json.dumps(schema)}}):
        r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=30, extra_body=extra)
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
        assert r.choices[0].finish_reason == "stop"
    lark = 'start: "ok " NUM\nNUM: /[0-9]{3}/'
    for extra in ({"guided_grammar": lark}, {"structured_outputs": {"grammar": lark}}):
        r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=10, extra_body=extra)
        assert re.fullmatch(r"ok [0-9]{3}", r.choices[0].message.content)


def test_two_constraints_or_a_constraint_beside_callable_tools_is_400_naming_the_field(openai_client, model_name):
    kw = dict(model=model_name, messages=USER, max_tokens=4)
    _bad(lambda: openai_client.chat.completions.create(
        **kw, response_format={"type": "json_object"}, extra_body={"guided_regex": "a+"}), "guided_regex")
    _bad(lambda: openai_client.chat.completions.create(
        **kw, extra_body={"structured_outputs": {"regex": "a+", "choice": ["a"]}}), "structured_outputs")
    _bad(lambda: openai_client.chat.completions.create(**kw, tools=[WEATHER], extra_body={"guided_regex": "a+"}),
         "guided_regex")


def test_constraint_that_cannot_compile_is_400_naming_the_field_without_grammar_internals(
        openai_client, model_name):
    kw = dict(model=model_name, messages=USER, max_tokens=4)
    _bad(lambda: openai_client.chat.completions.create(**kw, extra_body={"guided_regex": "(unclosed"}),
         "guided_regex")
    _bad(lambda: openai_client.chat.completions.create(
        **kw, extra_body={"structured_outputs": {"grammar": "start: undefined_rule"}}), "structured_outputs.grammar")
    _bad(lambda: openai_client.chat.completions.create(**kw, extra_body={"guided_json": "{not json"}),
         "guided_json")


# -- unknown fields / models ----------------------------------------------------------------
def test_unknown_fields_are_accepted_and_logged_once_per_field(openai_client, model_name, server):
    name = f"x_{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        r = openai_client.chat.completions.create(model=model_name, messages=USER, max_tokens=1,
                                                  extra_body={name: 1, "store": False})
        assert r.choices[0].finish_reason in ("stop", "length")
    deadline = time.monotonic() + 5
    while name not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [x for x in server.log().splitlines() if name in x]
    assert len(lines) == 1 and "present in the request but ignored" in lines[0]


def test_retrieve_model_returns_the_card_and_an_unknown_id_is_404_naming_model(openai_client, model_name):
    card = openai_client.models.retrieve(model_name)
    assert (card.id, card.object) == (model_name, "model")
    with pytest.raises(openai.NotFoundError) as info:
        openai_client.models.retrieve("gpt-17")
    assert info.value.body["param"] == "model"


def test_return_token_ids_gives_the_prompt_and_output_ids_whole_and_streamed(openai_client, model_name):
    """vLLM's ``return_token_ids``: the ids the server computed, so a client can rebuild the prompt exactly."""
    kw = dict(model=model_name, messages=USER, max_tokens=6, temperature=0.0, extra_body={"return_token_ids": True})
    r = openai_client.chat.completions.create(**kw)
    body = r.model_dump()
    assert len(body["prompt_token_ids"]) == r.usage.prompt_tokens
    assert len(body["choices"][0]["token_ids"]) == r.usage.completion_tokens
    stream = openai_client.chat.completions.create(stream=True, **kw)
    chunks = [c.model_dump() for c in stream]
    assert chunks[0]["prompt_token_ids"] == body["prompt_token_ids"]
    assert all(c.get("prompt_token_ids") is None for c in chunks[1:])
    streamed = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
    assert streamed == body["choices"][0]["token_ids"]
    plain = openai_client.chat.completions.create(**{**kw, "extra_body": {}}).model_dump()
    assert plain.get("prompt_token_ids") is None and plain["choices"][0].get("token_ids") is None
