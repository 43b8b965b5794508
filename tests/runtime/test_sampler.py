"""Sampling: filtered distributions equal hand-computed references, draws follow
them, penalties and logprobs are exact, seeded requests are reproducible
whatever else shares the batch."""

from __future__ import annotations

import math

import pytest
import torch

from loom.runtime.request import Request
from loom.runtime.sampler import Sampler, filtered_probs
from loom.runtime.sampling_params import SamplingParams
from tests.runtime.helpers import make_engine, random_prompts, run_to_completion

LOGITS = [2.0, 1.0, 0.5, 0.0, -1.0, 1.5]


def _row(seed: int | None = None, prompt=(1, 2), **kw) -> Request:
    req = Request("r", list(prompt), SamplingParams(seed=seed, **kw), 0.0, 16)
    if seed is not None:
        req.generator = torch.Generator().manual_seed(seed)
    return req


def _softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def _renorm(probs: list[float], keep: set[int]) -> list[float]:
    total = sum(p for i, p in enumerate(probs) if i in keep)
    return [p / total if i in keep else 0.0 for i, p in enumerate(probs)]


def test_top_k_then_top_p_distribution_equals_hand_computed_reference():
    t = 0.7
    p = _softmax([x / t for x in LOGITS])
    # top_k=4 keeps tokens 0, 5, 1, 2 (logits 2.0, 1.5, 1.0, 0.5).
    p = _renorm(p, {0, 5, 1, 2})
    # top_p=0.85 keeps the smallest prefix (by probability) reaching 0.85.
    order = sorted(range(6), key=lambda i: -p[i])
    keep, mass = set(), 0.0
    for i in order:
        keep.add(i)
        mass += p[i]
        if mass >= 0.85:
            break
    expected = _renorm(p, keep)
    got = filtered_probs(torch.tensor([LOGITS]), [_row(temperature=t, top_k=4, top_p=0.85)])[0]
    assert keep == {0, 5, 1}
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def test_min_p_drops_tokens_below_fraction_of_the_top_probability():
    p = _softmax(LOGITS)
    keep = {i for i, v in enumerate(p) if v >= 0.3 * max(p)}
    got = filtered_probs(torch.tensor([LOGITS]), [_row(temperature=1.0, min_p=0.3)])[0]
    assert got.tolist() == pytest.approx(_renorm(p, keep), abs=1e-6)


def test_top_k_keeps_ties_with_the_kth_logit():
    got = filtered_probs(torch.tensor([[1.0, 3.0, 1.0, 0.0]]), [_row(temperature=1.0, top_k=2)])[0]
    assert (got > 0).tolist() == [True, True, True, False]


def test_draws_follow_the_filtered_distribution():
    from scipy.stats import chisquare  # here, not at collection: scipy.stats takes ~1.3 s to import

    n = 20_000
    params = dict(temperature=0.7, top_k=4, top_p=0.9)
    rows = [_row(**params) for _ in range(n)]
    logits = torch.tensor([LOGITS]).repeat(n, 1)
    expected = filtered_probs(logits[:1].clone(), rows[:1])[0]
    tokens = Sampler(seed=1)(logits, rows).token_ids
    counts = torch.bincount(torch.tensor(tokens), minlength=6)
    assert all(counts[i] == 0 for i in range(6) if expected[i] == 0)
    support = [i for i in range(6) if expected[i] > 0]
    mass = sum(float(expected[i]) for i in support)
    stat = chisquare([int(counts[i]) for i in support], [float(expected[i]) / mass * n for i in support])
    assert stat.pvalue > 1e-3


def test_greedy_row_takes_argmax_and_ignores_seed():
    out = Sampler()(torch.tensor([LOGITS]), [_row(seed=5, temperature=0.0)])
    assert out.token_ids == [0]


def test_repetition_presence_and_frequency_penalties_are_exact():
    req = _row(prompt=(0, 3), temperature=0.0, repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    req.all_token_ids += [5, 5, 4]  # outputs: token 5 twice, token 4 once
    logits = torch.tensor([LOGITS])
    Sampler()(logits, [req])
    expected = list(LOGITS)
    for i in (0, 3, 5, 4):  # seen in prompt or output: CTRL rule
        expected[i] = expected[i] / 2.0 if expected[i] > 0 else expected[i] * 2.0
    expected[5] -= 0.5 + 2 * 0.25
    expected[4] -= 0.5 + 1 * 0.25
    assert logits[0].tolist() == pytest.approx(expected)


def test_penalties_of_a_mixed_batch_equal_each_row_penalised_alone():
    """Rows with different penalties, output lengths (none too) and rows without any penalty,
    in one batch: every row as if it were sampled alone; unpenalised rows untouched."""
    gen = torch.Generator().manual_seed(0)
    specs = [dict(repetition_penalty=1.3), dict(), dict(frequency_penalty=0.7), dict(presence_penalty=-0.4),
             dict(repetition_penalty=0.8, frequency_penalty=0.1, presence_penalty=0.2), dict()]
    rows = []
    for i, kw in enumerate(specs):
        req = _row(prompt=torch.randint(0, 6, (i + 1,), generator=gen).tolist(), temperature=0.0, **kw)
        req.all_token_ids += torch.randint(0, 6, (2 * i,), generator=gen).tolist()
        rows.append(req)
    base = torch.randn(len(rows), len(LOGITS), generator=gen)
    batched = base.clone()
    Sampler()(batched, rows)
    for i, req in enumerate(rows):
        alone = base[i:i + 1].clone()
        Sampler()(alone, [req])
        assert torch.allclose(batched[i], alone[0]), i
    assert torch.equal(batched[1], base[1]) and torch.equal(batched[5], base[5])


def test_logits_processor_hook_masks_tokens_before_sampling():
    def only_token_3(logits, rows):
        mask = torch.full_like(logits, float("-inf"))
        mask[:, 3] = 0
        logits += mask

    out = Sampler()(torch.tensor([LOGITS, LOGITS]), [_row(temperature=0.0), _row(seed=1)], [only_token_3])
    assert out.token_ids == [3, 3]


def test_logprobs_are_raw_model_logprobs_of_sampled_and_top_n():
    out = Sampler()(torch.tensor([LOGITS]), [_row(temperature=0.0, logprobs=2, repetition_penalty=1.5)])
    ref = torch.log_softmax(torch.tensor(LOGITS), -1)
    assert out.logprobs[0] == pytest.approx({0: float(ref[0]), 5: float(ref[5])})


def test_seeded_request_is_reproducible_across_batch_compositions(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    engine = make_engine(path)
    prompts = random_prompts(engine.vocab_size, [12, 30, 7, 50, 21], seed=11)
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=12, ignore_eos=True)
    alone = run_to_completion(engine, [("x", prompts[0], params)])["x"].token_ids
    others = [
        (f"o{i}", p, SamplingParams(temperature=0.8, seed=i if i % 2 else None, max_tokens=9, ignore_eos=True))
        for i, p in enumerate(prompts[1:])
    ]
    mixed = run_to_completion(engine, [others[0], others[1], ("x", prompts[0], params), *others[2:]])
    assert mixed["x"].token_ids == alone
    other_seed = run_to_completion(engine, [("x", prompts[0], params.clone(seed=99))])["x"].token_ids
    assert other_seed != alone


def test_engine_logprobs_equal_transformers_log_softmax(tiny_checkpoint):
    import copy

    from transformers import AutoModelForCausalLM

    path = tiny_checkpoint("qwen3")
    engine = make_engine(path)
    (prompt,) = random_prompts(engine.vocab_size, [15], seed=12)
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True, logprobs=3)
    out = run_to_completion(engine, [("a", prompt, params)])["a"]
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    cfg = copy.deepcopy(hf.generation_config)
    cfg.eos_token_id, cfg.do_sample, cfg.max_new_tokens, cfg.pad_token_id = None, False, 5, 0
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg,
                          output_logits=True, return_dict_in_generate=True)
    for step, (token, lp) in enumerate(zip(out.token_ids, out.logprobs)):
        ref_lp = torch.log_softmax(ref.logits[step][0].float(), -1)
        top = ref_lp.topk(3)
        assert set(lp) == set(top.indices.tolist()) | {token}
        for tok, value in lp.items():
            assert value == pytest.approx(float(ref_lp[tok]), abs=1e-4)
