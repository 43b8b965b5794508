"""``logit_bias``, ``min_tokens`` and ``prompt_logprobs`` against Hugging Face transformers.

The references: ``model.generate(sequence_bias=..., min_new_tokens=...)``
under greedy float32 decoding, and ``log_softmax`` of one full forward pass
over the prompt for prompt log-probabilities.  Each runs with chunked
prefill, with the prefix cache warm, and (for ``min_tokens``) with n-gram
speculation, since every engine feature must keep the reference's tokens.
"""

from __future__ import annotations

import copy

import pytest
import torch

from loom.runtime import SamplingParams
from loom.runtime.spec_decode import SpeculativeConfig
from tests.runtime.helpers import _hf_model, assert_pool_idle, make_engine, random_prompts, run_to_completion


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("qwen3")


def _hf(ckpt, prompt, max_new, **gen):
    model = _hf_model(ckpt)
    cfg = copy.deepcopy(model.generation_config)
    cfg.do_sample, cfg.max_new_tokens, cfg.pad_token_id = False, max_new, 0
    for k, v in gen.items():
        setattr(cfg, k, v)
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             generation_config=cfg)
    return out[0, len(prompt):].tolist()


def test_logit_bias_output_equals_transformers_sequence_bias(ckpt):
    engine = make_engine(ckpt)
    prompt = random_prompts(engine.vocab_size, [40], seed=3)[0]
    plain = _hf(ckpt, prompt, 8, eos_token_id=None)
    # push the 3rd greedy token down and another token up: the greedy path must change, as in HF
    bias = {plain[2]: -100.0, 7: 3.5}
    ref = _hf(ckpt, prompt, 8, eos_token_id=None, sequence_bias={(t,): b for t, b in bias.items()})
    assert ref != plain
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True,
                            logit_bias={str(t): b for t, b in bias.items()})  # JSON keys are strings
    out = run_to_completion(engine, [("a", prompt, params)])["a"]
    assert out.token_ids == ref
    assert_pool_idle(engine)


@pytest.mark.parametrize("spec", [False, True], ids=["plain", "ngram"])
def test_min_tokens_holds_back_eos_and_stop_tokens_as_transformers_min_new_tokens(ckpt, spec):
    spec_cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=3) if spec else None
    engine = make_engine(ckpt, speculative_config=spec_cfg)
    prompt = random_prompts(engine.vocab_size, [24], seed=5)[0] * 3  # repeats: n-gram drafts happen
    free = _hf(ckpt, prompt, 12, eos_token_id=None)
    eos = free[1]  # make the 2nd greedy token an "eos": without min_tokens the output stops there
    ref = _hf(ckpt, prompt, 12, eos_token_id=eos, min_new_tokens=6)
    params = SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[eos], min_tokens=6)
    out = run_to_completion(engine, [("a", prompt, params),
                                     ("b", prompt, params.clone(min_tokens=0))])
    assert out["b"].token_ids == [free[0], eos]  # the stop token ends it early without min_tokens
    assert len(out["a"].token_ids) >= 6
    assert out["a"].token_ids == ref[:len(out["a"].token_ids)]
    assert eos not in out["a"].token_ids[:6]
    assert_pool_idle(engine)


def test_min_tokens_skips_stop_strings_until_reached(ckpt):
    engine = make_engine(ckpt)
    prompt = random_prompts(engine.vocab_size, [30], seed=9)[0]
    free = run_to_completion(engine, [("f", prompt, SamplingParams(temperature=0.0, max_tokens=10,
                                                                   ignore_eos=True))])["f"]
    stop = free.text[:1] if free.text[:1].strip() else free.text.strip()[:1]
    assert stop
    early = run_to_completion(engine, [("e", prompt, SamplingParams(
        temperature=0.0, max_tokens=10, ignore_eos=True, stop=[stop]))])["e"]
    held = run_to_completion(engine, [("h", prompt, SamplingParams(
        temperature=0.0, max_tokens=10, ignore_eos=True, stop=[stop], min_tokens=10))])["h"]
    assert len(early.token_ids) < 10
    assert held.token_ids == free.token_ids and held.finish_reason == "length"


def _hf_prompt_logprobs(ckpt, prompt):
    with torch.inference_mode():
        logits = _hf_model(ckpt)(torch.tensor([prompt])).logits[0].float()
    lsm = torch.log_softmax(logits, dim=-1)
    return lsm


@pytest.mark.parametrize("chunk", [2048, 16], ids=["one-chunk", "chunked-prefill"])
def test_prompt_logprobs_equal_transformers_forward_even_with_the_prompt_cached(ckpt, chunk):
    engine = make_engine(ckpt, max_num_batched_tokens=chunk)
    prompt = random_prompts(engine.vocab_size, [70], seed=11)[0]
    # warm the prefix cache with the same prompt first: prompt_logprobs must still compute every position
    run_to_completion(engine, [("warm", prompt, SamplingParams(temperature=0.0, max_tokens=2))])
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, prompt_logprobs=2, logprobs=1)
    out = run_to_completion(engine, [("p", prompt, params)])["p"]
    lsm = _hf_prompt_logprobs(ckpt, prompt)
    assert out.num_cached_tokens == 0
    assert len(out.prompt_logprobs) == len(prompt) and out.prompt_logprobs[0] is None
    for pos, entry in enumerate(out.prompt_logprobs[1:]):
        row = lsm[pos]
        tok = prompt[pos + 1]
        assert entry[tok] == pytest.approx(float(row[tok]), abs=1e-4)
        top = row.topk(2)
        for t, v in zip(top.indices.tolist(), top.values.tolist()):
            assert entry[t] == pytest.approx(v, abs=1e-4)
        assert len(entry) <= 3
    # the sampled tokens are unaffected by the extra logits rows
    assert out.token_ids == _hf(ckpt, prompt, 3, eos_token_id=None)
    assert_pool_idle(engine)


def test_prompt_logprobs_come_once_in_delta_mode(ckpt):
    engine = make_engine(ckpt)
    prompt = random_prompts(engine.vocab_size, [20], seed=2)[0]
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, prompt_logprobs=0,
                                              output_kind="delta"), request_id="d")
    seen = []
    while engine.has_unfinished_requests():
        seen += [o.prompt_logprobs for o in engine.step() if o.new_token_ids]
    assert seen[0] is not None and len(seen[0]) == len(prompt)
    assert all(p is None for p in seen[1:])
