"""Incremental detokenization: multi-byte characters never split, stop strings
exact (also across token boundaries), streamed deltas add up to the final text;
stop token ids and stop strings end requests in the engine."""

from __future__ import annotations

import pytest
from tokenizers.decoders import DecodeStream
from transformers import AutoTokenizer

from loom.runtime.detokenizer import IncrementalDetokenizer
from loom.runtime.sampling_params import SamplingParams
from tests.runtime.helpers import greedy, make_engine, random_prompts, run_to_completion

TEXT = "Unicode: héllo wörld 😀🎉 世界你好 — done."


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(str(tiny_checkpoint("qwen3")))


def _stream(tokenizer, ids, prompt=(), **params):
    detok = IncrementalDetokenizer(tokenizer.backend_tokenizer, list(prompt), SamplingParams(**params))
    deltas, stop = [], None
    for t in ids:
        stop = detok.add_token(t)
        deltas.append(detok.delta(finished=stop is not None))
        if stop is not None:
            break
    deltas.append(detok.delta(finished=True))
    return detok.text, deltas, stop


def test_multibyte_characters_split_across_byte_level_tokens_never_surface_broken(tokenizer):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    # The byte-level BPE splits at least one character over several tokens.
    assert any("\ufffd" in tokenizer.decode([t]) for t in ids)
    text, deltas, _ = _stream(tokenizer, ids)
    assert text == TEXT
    assert "".join(deltas) == TEXT
    assert all("\ufffd" not in d for d in deltas)


def _decode_stream_alone(tokenizer, ids):
    """Reference: ``tokenizers``' own incremental decoder over the output ids only."""
    stream = DecodeStream(skip_special_tokens=True)
    return "".join(piece for t in ids if (piece := stream.step(tokenizer.backend_tokenizer, t)))


def test_output_text_is_the_decoding_of_output_tokens_alone_at_every_prompt_split(tokenizer):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    mid_char_splits = [k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd")]
    assert len(mid_char_splits) >= 3  # the prompt ends inside a multi-byte character
    for k in range(1, len(ids)):
        text, deltas, _ = _stream(tokenizer, ids[k:], prompt=ids[:k])
        # no prompt text; orphan continuation bytes decode as the tokenizer decodes them
        assert text == tokenizer.decode(ids[k:]) == _decode_stream_alone(tokenizer, ids[k:]), k
        assert "".join(deltas) == text


def test_stop_string_cuts_text_before_it_and_deltas_never_show_it(tokenizer):
    ids = tokenizer.encode("The answer is 42. STOP and more text", add_special_tokens=False)
    text, deltas, stop = _stream(tokenizer, ids, stop=["STOP"])
    assert stop == "STOP"
    assert text == "The answer is 42. "
    assert "".join(deltas) == text


def test_stop_string_spanning_tokens_with_include_stop_str_in_output(tokenizer):
    ids = tokenizer.encode("alpha beta gamma delta", add_special_tokens=False)
    text, deltas, stop = _stream(tokenizer, ids, stop=["ta gam", "zzz"], include_stop_str_in_output=True)
    assert stop == "ta gam"
    assert text == "alpha beta gam"
    assert "".join(deltas) == text


def test_with_several_stop_strings_text_ends_before_the_first_one_completed(tokenizer):
    full = "one two three four"
    stops = ["four", "two thr", "o t", "e t"]
    text, deltas, stop = _stream(tokenizer, tokenizer.encode(full, add_special_tokens=False), stop=stops)
    assert stop in stops
    assert text == full[: full.index(stop)] == "".join(deltas)
    assert not any(s in text for s in stops)


def test_text_without_stop_match_is_held_back_only_by_longest_stop_minus_one(tokenizer):
    ids = tokenizer.encode("abcdefgh", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer.backend_tokenizer, [], SamplingParams(stop=["xyz"]))
    for t in ids:
        detok.add_token(t)
    assert detok.delta(finished=False) == "abcdef"
    assert detok.delta(finished=True) == "gh"


def test_engine_stop_string_ends_request_with_exact_text(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    (prompt,) = random_prompts(engine.vocab_size, [20], seed=21)
    full = run_to_completion(engine, [("a", prompt, greedy(30))])["a"]
    stop = full.text[len(full.text) // 2:len(full.text) // 2 + 3]
    assert len(stop) == 3
    cut = full.text.index(stop)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True, stop=[stop])
    engine.add_request(prompt, params, request_id="b")
    streamed, final = "", None
    while engine.has_unfinished_requests():
        for out in engine.step():
            streamed += out.new_text
            final = out
    assert final.finish_reason == "stop" and final.stop_reason == stop
    assert final.text == full.text[:cut] == streamed


def test_engine_text_excludes_prompt_that_ends_inside_a_multibyte_character(tiny_checkpoint, tokenizer):
    engine = make_engine(tiny_checkpoint("qwen3"))
    ids = tokenizer.encode("hello world 世界", add_special_tokens=False)
    prompt = next(ids[:k] for k in range(len(ids), 0, -1) if tokenizer.decode(ids[:k]).endswith("\ufffd"))
    engine.add_request(prompt, greedy(16), request_id="a")
    streamed, final = "", None
    while engine.has_unfinished_requests():
        for out in engine.step():
            streamed += out.new_text
            final = out
    assert final.text == _decode_stream_alone(tokenizer, final.token_ids) == streamed
    assert "hello" not in final.text and "world" not in final.text


def test_engine_stop_token_id_ends_request_and_keeps_the_token(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    (prompt,) = random_prompts(engine.vocab_size, [20], seed=22)
    full = run_to_completion(engine, [("a", prompt, greedy(20))])["a"].token_ids
    stop_id = full[6]
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, stop_token_ids=[stop_id])
    out = run_to_completion(engine, [("b", prompt, params)])["b"]
    assert out.token_ids == full[: full.index(stop_id) + 1]
    assert out.finish_reason == "stop" and out.stop_reason == stop_id


def test_engine_stops_at_eos_unless_ignore_eos(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    (prompt,) = random_prompts(engine.vocab_size, [20], seed=23)
    full = run_to_completion(engine, [("a", prompt, greedy(20))])["a"].token_ids
    engine.eos_token_ids = frozenset({full[4]})  # pretend the model's EOS is its 5th token
    out = run_to_completion(engine, [("b", prompt, SamplingParams(temperature=0.0, max_tokens=20))])["b"]
    assert out.token_ids == full[: full.index(full[4]) + 1]
    assert out.finish_reason == "stop" and out.stop_reason is None
