"""``POST /v1/completions`` through the official ``openai`` client against ``loom serve``.

Tiny random-weight Qwen3 (shapes and exact mechanics: prompt shapes, choice
order, seeds, echo, logprob positions, streaming, errors).
"""

from __future__ import annotations

import openai
import pytest

from tests.api.server import hang_up_midway

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def tok(checkpoint):  # noqa: ANN001, ANN201
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


def _bad(call, param: str, status: type[openai.APIStatusError] = openai.BadRequestError) -> dict:  # noqa: ANN001
    with pytest.raises(status) as info:
        call()
    err = info.value.body
    assert err["param"] == param, err
    assert "Traceback" not in err["message"], err
    return err


def test_string_prompt_answers_a_text_completion_with_usage_and_default_16_tokens(openai_client, model_name, tok):
    r = openai_client.completions.create(model=model_name, prompt=PROMPT, temperature=0,
                                         extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == model_name
    (choice,) = r.choices
    assert choice.index == 0 and choice.finish_reason == "length" and choice.logprobs is None
    assert r.usage.prompt_tokens == len(tok(PROMPT).input_ids)
    assert r.usage.completion_tokens == 16  # OpenAI's default max_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + 16
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_token_id_prompts_give_the_same_greedy_text_as_the_text_prompts(openai_client, model_name, tok):
    texts = [PROMPT, "Once upon a time"]
    ids = [tok(t).input_ids for t in texts]
    kw = dict(model=model_name, temperature=0, max_tokens=6)
    by_text = openai_client.completions.create(prompt=texts, **kw)
    by_ids = openai_client.completions.create(prompt=ids, **kw)
    one_ids = openai_client.completions.create(prompt=ids[1], **kw)
    assert [c.text for c in by_ids.choices] == [c.text for c in by_text.choices]
    assert one_ids.choices[0].text == by_text.choices[1].text
    assert by_ids.usage.prompt_tokens == sum(map(len, ids))


def test_choices_are_prompt_major_and_sample_j_uses_seed_plus_j(openai_client, model_name):
    kw = dict(model=model_name, temperature=1.0, max_tokens=6)
    prompts = [PROMPT, "Once upon a time"]
    r = openai_client.completions.create(prompt=prompts, n=3, seed=40, **kw)
    assert [c.index for c in r.choices] == list(range(6))
    for p, prompt in enumerate(prompts):
        for j in range(3):
            alone = openai_client.completions.create(prompt=prompt, seed=40 + j, **kw).choices[0].text
            assert r.choices[p * 3 + j].text == alone, (p, j)
    assert len({c.text for c in r.choices}) > 2  # the samples differ (a shared seed would repeat them)


def test_echo_logprobs_put_each_prompt_tokens_logprob_at_its_position_first_null(openai_client, model_name, tok):
    prompt = tok(PROMPT).input_ids
    forced = tok(" Paris").input_ids[0]
    # step 1: the model's raw logprob of `forced` after the prompt (the bias picks it, logprobs stay raw)
    gen = openai_client.completions.create(model=model_name, prompt=prompt, max_tokens=1, temperature=0,
                                           logprobs=0, logit_bias={str(forced): 100})
    expected = gen.choices[0].logprobs.token_logprobs[0]
    # step 2: the same token as the prompt's last token, echoed with max_tokens=0
    r = openai_client.completions.create(model=model_name, prompt=[*prompt, forced], max_tokens=0, echo=True,
                                         logprobs=2)
    (choice,) = r.choices
    lp = choice.logprobs
    assert choice.text == tok.decode([*prompt, forced]) and r.usage.completion_tokens == 0
    assert len(lp.tokens) == len(prompt) + 1 == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[-1] == pytest.approx(expected, abs=1e-3)
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    for token, top, x in zip(lp.tokens[1:], lp.top_logprobs[1:], lp.token_logprobs[1:]):
        assert 2 <= len(top) <= 3 and top[token] == x  # the 2 most likely plus the prompt's own token
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]


def test_echo_with_generation_puts_the_prompt_before_the_completion(openai_client, model_name):
    kw = dict(model=model_name, prompt=PROMPT, temperature=0, max_tokens=5)
    plain = openai_client.completions.create(**kw).choices[0]
    echoed = openai_client.completions.create(**kw, echo=True, logprobs=1).choices[0]
    assert echoed.text == PROMPT + plain.text
    n_prompt = len(echoed.logprobs.tokens) - 5
    out = echoed.logprobs
    # greedy: each generated token is the most likely one at its position
    for token, top, x in zip(out.tokens[n_prompt:], out.top_logprobs[n_prompt:], out.token_logprobs[n_prompt:]):
        assert max(top.values()) == pytest.approx(x) and top[token] == x


def test_stream_pieces_concatenate_to_the_non_streamed_choices_with_logprobs_and_usage(openai_client, model_name):
    kw = dict(model=model_name, prompt=[PROMPT, "Once upon a time"], n=2, seed=3, temperature=1.0,
              max_tokens=7, echo=True, logprobs=2)
    whole = openai_client.completions.create(**kw)
    chunks = list(openai_client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text, tokens, offsets, lps, finish = {}, {}, {}, {}, {}
    for c in chunks[:-1]:
        (ch,) = c.choices
        assert c.object == "text_completion" and c.usage is None
        text[ch.index] = text.get(ch.index, "") + ch.text
        tokens.setdefault(ch.index, []).extend(ch.logprobs.tokens if ch.logprobs else [])
        offsets.setdefault(ch.index, []).extend(ch.logprobs.text_offset if ch.logprobs else [])
        lps.setdefault(ch.index, []).extend(ch.logprobs.token_logprobs if ch.logprobs else [])
        if ch.finish_reason:
            finish[ch.index] = ch.finish_reason
    assert text == {c.index: c.text for c in whole.choices}
    assert tokens == {c.index: c.logprobs.tokens for c in whole.choices}
    assert offsets == {c.index: c.logprobs.text_offset for c in whole.choices}
    for c in whole.choices:
        assert lps[c.index][0] is None and lps[c.index][1:] == pytest.approx(c.logprobs.token_logprobs[1:], abs=1e-4)
    assert finish == {c.index: c.finish_reason for c in whole.choices}
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == whole.usage.completion_tokens == 4 * 7
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens


def test_return_token_ids_gives_each_choices_prompt_and_output_ids_streamed_once(openai_client, model_name, tok):
    kw = dict(model=model_name, prompt=[PROMPT, "Once upon a time"], temperature=0, max_tokens=5,
              extra_body={"return_token_ids": True, "ignore_eos": True})
    whole = openai_client.completions.create(**kw)
    for c, prompt in zip(whole.choices, [PROMPT, "Once upon a time"]):
        assert c.prompt_token_ids == tok(prompt).input_ids
        assert len(c.token_ids) == 5 and tok.decode(c.token_ids) == c.text
    prompt_ids, ids = {}, {}
    for chunk in openai_client.completions.create(**kw, stream=True):
        (ch,) = chunk.choices
        if ch.prompt_token_ids is not None:
            assert ch.index not in prompt_ids  # the prompt comes once, in the choice's first chunk
            prompt_ids[ch.index] = ch.prompt_token_ids
        ids[ch.index] = ids.get(ch.index, []) + ch.token_ids
    assert prompt_ids == {c.index: c.prompt_token_ids for c in whole.choices}
    assert ids == {c.index: c.token_ids for c in whole.choices}


def test_default_max_tokens_is_cut_to_the_window_but_an_explicit_one_that_does_not_fit_is_400(
        openai_client, model_name):
    long = [100] * 1020  # the shared server's window is 1024 tokens
    r = openai_client.completions.create(model=model_name, prompt=long, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "length"
    err = _bad(lambda: openai_client.completions.create(model=model_name, prompt=long, max_tokens=16),
               "max_tokens")
    assert err["code"] == "context_length_exceeded"
    err = _bad(lambda: openai_client.completions.create(model=model_name, prompt=[[1, 2], [100] * 1024]),
               "prompt.1")
    assert err["code"] == "context_length_exceeded"


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"suffix": " and so on"}, "suffix"),
    ({"best_of": 3}, "best_of"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"logprobs": 21}, "logprobs"),
    ({"prompt": [5, 10**6]}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"min_tokens": 20, "max_tokens": 5}, "min_tokens"),
])
def test_unsupported_or_invalid_fields_are_400_naming_the_field(openai_client, model_name, kwargs, param):
    body = {"model": model_name, "prompt": PROMPT, "max_tokens": 2, **kwargs}
    extra = {k: body.pop(k) for k in ("min_tokens",) if k in body}
    _bad(lambda: openai_client.completions.create(**body, extra_body=extra or None), param)


def test_best_of_equal_to_n_is_accepted(openai_client, model_name):
    r = openai_client.completions.create(model=model_name, prompt=PROMPT, max_tokens=2, n=2, best_of=2, seed=1)
    assert [c.index for c in r.choices] == [0, 1]


def test_unknown_model_is_404_naming_model(openai_client):
    _bad(lambda: openai_client.completions.create(model="gpt-3.5-turbo-instruct", prompt=PROMPT, max_tokens=2),
         "model", openai.NotFoundError)


def test_guided_choice_constrains_a_completion(openai_client, model_name):
    r = openai_client.completions.create(model=model_name, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=2,
                                         extra_body={"guided_choice": ["Paris", "Lyon"]})
    assert r.choices[0].text in ("Paris", "Lyon")


@pytest.mark.parametrize("stream", [True, False])
def test_client_hanging_up_aborts_every_prompt_and_sample_and_frees_all_kv_blocks(server, keys, model_name, stream):
    body = {"model": model_name, "prompt": [PROMPT, "Once upon a time"], "n": 4, "max_tokens": 1000,
            "ignore_eos": True}
    before, h = hang_up_midway(server, keys["alice"], "/v1/completions", body, stream)
    assert h["kv_blocks_free"] == h["kv_blocks_total"]
    # aborted: fewer tokens than the 8 x 1000 the requests would have generated (how many fewer
    # depends on how soon a loaded machine's event loop reads the hang-up, not on the design)
    assert h["num_generated_tokens"] - before["num_generated_tokens"] < 8 * 1000
