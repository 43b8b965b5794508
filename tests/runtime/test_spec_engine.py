"""Speculative decoding inside the engine: lossless under continuous batching.

Greedy output with speculation must equal greedy output without it, token for
token, for both proposers, over a batch that mixes prefix-cache hits, chunked
prefill and preemption; sampling must keep the target's distribution.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from loom.runtime import SamplingParams
from loom.runtime.spec_decode import SpeculativeConfig
from tests.runtime.helpers import assert_pool_idle, hf_greedy, make_engine, run_to_completion

ALPHA = 1e-3


def _noisy_copy(src: Path, dst: Path, scale: float = 0.05) -> Path:
    """A draft model that agrees with the target often but not always: the
    target's weights plus ``scale`` x (per-tensor std) Gaussian noise, same tokenizer."""
    from safetensors.torch import load_file, save_file

    if not dst.exists():
        shutil.copytree(src, dst)
        weights = load_file(dst / "model.safetensors")
        g = torch.Generator().manual_seed(0)
        noisy = {k: v + scale * v.std() * torch.randn(v.shape, generator=g) if v.dim() == 2 else v
                 for k, v in weights.items()}
        save_file(noisy, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def _mixed_batch(vocab: int) -> list[tuple[str, list[int], SamplingParams]]:
    """Shared prefixes (cache hits), long prompts (chunked), repeats (n-gram matches)."""
    rng = random.Random(0)
    shared = [rng.randrange(vocab) for _ in range(64)]
    motif = [rng.randrange(vocab) for _ in range(6)]
    prompts = [
        shared + [rng.randrange(vocab) for _ in range(9)],
        shared + [rng.randrange(vocab) for _ in range(30)],
        motif * 12,
        [rng.randrange(vocab) for _ in range(150)],
        [rng.randrange(vocab) for _ in range(7)],
        shared + motif * 3,
        [rng.randrange(vocab) for _ in range(40)] + motif * 4,
        [rng.randrange(vocab) for _ in range(3)],
    ]
    return [(f"r{i}", p, SamplingParams(temperature=0.0, max_tokens=40 + 4 * i, ignore_eos=True))
            for i, p in enumerate(prompts)]


def _run(path, spec: SpeculativeConfig | None, **kw):
    engine = make_engine(path, speculative_config=spec, **kw)
    outs = run_to_completion(engine, _mixed_batch(engine.vocab_size))
    assert_pool_idle(engine)
    return outs, engine.stats()


# small pool -> preemption; small budget -> chunked prefill; shared prefix -> cache hits
_PRESSURE = dict(num_kv_blocks=24, max_num_batched_tokens=48, max_model_len=512)


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_greedy_with_speculation_equals_greedy_without(tiny_checkpoint, tmp_path_factory,
                                                      method: str) -> None:
    path = tiny_checkpoint("qwen3")
    draft = str(_noisy_copy(path, tmp_path_factory.mktemp("draft") / "noisy"))
    base, base_stats = _run(path, None, **_PRESSURE)
    spec = SpeculativeConfig(method=method, num_speculative_tokens=4, prompt_lookup_min=1,
                             prompt_lookup_max=3, draft_model=draft, disable_by_batch_size=None)
    outs, stats = _run(path, spec, **_PRESSURE)
    for rid, out in base.items():
        assert outs[rid].token_ids == out.token_ids, rid
    assert stats["num_preemptions"] > 0
    assert sum(o.num_cached_tokens for o in outs.values()) > 0
    # some drafts accepted, some rejected: both paths of the verifier and the rollback ran
    assert 0 < stats["spec_num_accepted_tokens"] < stats["spec_num_draft_tokens"]
    assert stats["spec_num_drafts"] == sum(o.num_drafts for o in outs.values())
    assert stats["spec_num_accepted_tokens"] == sum(o.num_accepted_tokens for o in outs.values())
    # speculation saved target passes: fewer steps for the same tokens
    assert stats["num_steps"] < base_stats["num_steps"]


@pytest.mark.parametrize("pressure", [False, True])
def test_draft_model_equal_to_target_accepts_every_drafted_token(tiny_checkpoint, pressure) -> None:
    # under preemption, chunked prefill and prefix hits too: the draft's KV (shared
    # block tables, lazy catch-up) must stay exactly the target's
    path = tiny_checkpoint("llama")
    spec = SpeculativeConfig(method="draft_model", draft_model=str(path), num_speculative_tokens=3,
                             disable_by_batch_size=None)
    outs, stats = _run(path, spec, **(_PRESSURE if pressure else dict(num_kv_blocks=256, max_model_len=512)))
    assert (stats["num_preemptions"] > 0) == pressure
    assert stats["spec_num_draft_tokens"] > 100
    assert stats["spec_num_accepted_tokens"] == stats["spec_num_draft_tokens"]
    assert stats["spec_acceptance_rate"] == 1.0
    assert all(o.num_accepted_tokens == o.num_draft_tokens for o in outs.values())


def test_adaptive_k_backs_off_a_draft_that_is_never_accepted(tiny_checkpoint) -> None:
    path = tiny_checkpoint("qwen3")
    useless = str(tiny_checkpoint("qwen3", seed=1))  # same tokenizer, unrelated weights
    subs = [("a", [3, 1, 4, 1, 5, 9, 2, 6], SamplingParams(temperature=0.0, max_tokens=80, ignore_eos=True))]
    drafted = {}
    for adaptive in (False, True):
        spec = SpeculativeConfig(method="draft_model", draft_model=useless, num_speculative_tokens=4,
                                 disable_by_batch_size=None, adaptive_k=adaptive)
        engine = make_engine(path, speculative_config=spec)
        outs = run_to_completion(engine, subs)
        drafted[adaptive] = engine.stats()["spec_num_draft_tokens"]
        assert outs["a"].token_ids == run_to_completion(make_engine(path), subs)["a"].token_ids
    assert drafted[False] >= 4 * 70  # every step drafts k = 4 (almost none accepted)
    assert drafted[True] < drafted[False] / 4  # halved to 0, then one probe per pause


def test_rejected_drafts_release_their_kv_blocks(tiny_checkpoint) -> None:
    path = tiny_checkpoint("qwen3")
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=8, prompt_lookup_min=1,
                             disable_by_batch_size=None, adaptive_k=False)
    engine = make_engine(path, speculative_config=spec, block_size=4, num_kv_blocks=128)
    rng = random.Random(3)
    engine.add_request([rng.randrange(100) for _ in range(5)] * 4,
                       SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True), request_id="a")
    rejected = 0
    while engine.has_unfinished_requests():
        engine.step()
        req = engine.requests.get("a")
        if req is None:
            break
        # after verification the block table ends at the kept tokens (+ the next one's
        # slot): blocks reserved for rejected drafts went back to the pool
        assert len(req.block_ids) <= engine.kv.blocks_needed(req.num_tokens)
        assert req.num_computed_tokens == req.num_tokens - 1
        rejected = req.num_draft_tokens - req.num_accepted_tokens
        engine.kv.check_invariants(engine.requests.values())
    assert rejected > 0
    assert_pool_idle(engine)


def test_speculation_switches_off_at_the_batch_size_threshold(tiny_checkpoint) -> None:
    path = tiny_checkpoint("qwen3")
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=3, disable_by_batch_size=3)
    engine = make_engine(path, speculative_config=spec)
    subs = [(f"r{i}", [7, 8, 9] * 5, SamplingParams(temperature=0.0, max_tokens=8 * (i + 1),
                                                      ignore_eos=True)) for i in range(4)]
    run_to_completion(engine, subs)
    stats = engine.stats()
    # 4 then 3 running: off; once 2 remain: on
    assert stats["spec_num_disabled_steps"] >= 8
    assert stats["spec_num_spec_steps"] > 0 and stats["spec_num_drafts"] > 0


def _target_second_token_distribution(path, prompt: list[int], temperature: float) -> np.ndarray:
    """p(y2) = sum_y1 p(y1 | prompt) p(y2 | prompt, y1), from transformers (float32)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.inference_mode():
        p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].double() / temperature, -1)
        vocab = p1.shape[0]
        batch = torch.cat([torch.tensor([prompt] * vocab), torch.arange(vocab)[:, None]], dim=1)
        p2 = torch.softmax(model(batch).logits[:, -1].double() / temperature, -1)
    return (p1[:, None] * p2).sum(0).numpy()


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_sampling_with_speculation_keeps_the_target_distribution(checkpoint_factory,
                                                                 tmp_path_factory,
                                                                 method: str) -> None:
    # tiny vocabulary, weights scaled up so next-token distributions are peaked
    # (perplexity ~15): drafts are often accepted and often rejected
    path = checkpoint_factory("qwen3", "tiny", vocab_size=300, initializer_range=0.5)
    draft = _noisy_copy(path, tmp_path_factory.mktemp("draft300") / "noisy")
    temperature, num = 0.6, int(os.environ.get("LOOM_SPEC_CHI2_SAMPLES", 2000))
    seed_ids = [int(t) for t in np.random.default_rng(0).permutation(300)[:10]]
    prompt = seed_ids + hf_greedy(path, seed_ids, 40)  # the model's own text: n-grams recur
    spec = SpeculativeConfig(method=method, num_speculative_tokens=3, prompt_lookup_min=1,
                             prompt_lookup_max=2, draft_model=str(draft),
                             disable_by_batch_size=None)
    engine = make_engine(path, speculative_config=spec, num_kv_blocks=2048, max_num_seqs=256,
                         max_num_batched_tokens=4096, max_waiting=100_000)
    subs = [(f"s{i}", prompt, SamplingParams(temperature=temperature, max_tokens=3, seed=i,
                                              ignore_eos=True)) for i in range(num)]
    outs = run_to_completion(engine, subs, check_invariants=False)
    stats = engine.stats()
    assert stats["spec_num_drafts"] > num // 2  # the second token went through the verifier
    if method == "draft_model":  # a near-copy of the target: about half accepted
        assert 0.2 < stats["spec_acceptance_rate"] < 0.9
    else:  # n-gram drafts of a random model at T > 0 are rarely right, but some are
        assert stats["spec_num_accepted_tokens"] > 0
    second = np.array([outs[f"s{i}"].token_ids[1] for i in range(num)])
    expected = _target_second_token_distribution(path, prompt, temperature) * num
    observed = np.bincount(second, minlength=len(expected)).astype(float)
    big = expected >= 5  # pool rare tokens so the chi-square approximation holds
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    assert big.sum() >= 10
    pvalue = chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    print(method, pvalue, stats["spec_acceptance_rate"], big.sum())
    assert pvalue > ALPHA, (pvalue, stats["spec_acceptance_rate"])


def test_logits_processors_also_constrain_the_rows_that_verify_drafts(tiny_checkpoint) -> None:
    # a draft model equal to the target drafts the target's raw greedy tokens; a
    # processor that allows one token must still decide every emitted token
    path = tiny_checkpoint("llama")
    spec = SpeculativeConfig(method="draft_model", draft_model=str(path), num_speculative_tokens=3,
                             disable_by_batch_size=None)
    engine = make_engine(path, speculative_config=spec)
    allowed = 11

    def only_one_token(logits: torch.Tensor, rows) -> None:
        keep = logits[:, allowed].clone()
        logits.fill_(float("-inf"))
        logits[:, allowed] = keep

    engine.logits_processors.append(only_one_token)
    outs = run_to_completion(engine, [(f"r{i}", [5 + i, 6, 7, 8] * 4,
                                       SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
                                      for i in range(2)])
    assert engine.stats()["spec_num_draft_tokens"] > 0
    for out in outs.values():
        assert out.token_ids == [allowed] * 24


def _seeded_tokens(path, spec, num_others: int) -> tuple[list[int], int]:
    engine = make_engine(path, speculative_config=spec)
    subs = [("seeded", [3, 4, 5, 6] * 6, SamplingParams(temperature=0.7, seed=1234, max_tokens=40,
                                                        ignore_eos=True))]
    subs += [(f"o{i}", [9 + i] * 12, SamplingParams(temperature=1.0, max_tokens=6 + 6 * i, ignore_eos=True))
             for i in range(num_others)]
    outs = run_to_completion(engine, subs)
    return outs["seeded"].token_ids, outs["seeded"].num_draft_tokens


def test_a_seeded_request_gives_the_same_tokens_with_or_without_speculation_in_any_batch(tiny_checkpoint) -> None:
    path = tiny_checkpoint("llama")
    spec = SpeculativeConfig(method="draft_model", draft_model=str(path), num_speculative_tokens=3,
                             disable_by_batch_size=4)
    plain, _ = _seeded_tokens(path, None, 0)
    alone, drafted = _seeded_tokens(path, spec, 0)  # speculation on throughout
    crowded, _ = _seeded_tokens(path, spec, 5)  # off while 6 run, on as they finish
    assert drafted > 0
    assert alone == plain
    assert crowded == plain
