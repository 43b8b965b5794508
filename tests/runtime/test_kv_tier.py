"""The disk KV tier: a pinned block that must leave the pool is written to disk and loaded back on the next
prefix hit, also by a restarted engine, and the output equals an engine that computed everything; a corrupt
or foreign entry is recomputed, never served."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loom.runtime.kv_retention import KVRetention
from loom.runtime.kv_tier import DiskKVTier, chain_keys
from loom.runtime.sampling_params import SamplingParams

PROMPT = list(range(100, 164))  # 4 blocks of 16


def test_a_block_round_trips_and_a_corrupt_or_foreign_one_is_refused(tmp_path: Path):
    tier = DiskKVTier(tmp_path, "model-a", max_bytes=1 << 20)
    kv = torch.randn(2, 3, 16, 2, 8)
    key = chain_keys("model-a", None, PROMPT, 16)[0]
    tier.put(key, kv)
    assert torch.equal(tier.get(key), kv)
    assert DiskKVTier(tmp_path, "model-b", max_bytes=1 << 20).get(key) is None  # another model: another folder
    path = next(tier.folder.glob("*.kv"))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    reopened = DiskKVTier(tmp_path, "model-a", max_bytes=1 << 20)
    assert key in reopened and reopened.get(key) is None
    assert reopened.stats()["kv_tier_corrupt"] == 1 and not path.exists()


def test_a_run_of_blocks_stops_at_the_first_missing_or_corrupt_one(tmp_path: Path):
    tier = DiskKVTier(tmp_path, "model-a", max_bytes=1 << 22)
    keys = chain_keys("model-a", None, list(range(100, 100 + 16 * 6)), 16)
    blocks = [torch.randn(2, 3, 16, 2, 8).to(torch.bfloat16) for _ in keys]
    for key, kv in zip(keys[:5], blocks[:5], strict=True):  # the sixth is never written
        tier.put(key, kv)
    run = tier.get_run(keys)
    assert len(run) == 5 and all(torch.equal(a, b) for a, b in zip(run, blocks, strict=False))
    assert run[0].dtype == torch.bfloat16 and run[0].shape == (2, 3, 16, 2, 8)
    corrupt = tier.folder / f"{keys[2].hex()}.kv"
    data = bytearray(corrupt.read_bytes())
    data[70] ^= 0x01  # one bit of the payload
    corrupt.write_bytes(bytes(data))
    assert len(tier.get_run(keys)) == 2  # blocks 0-1; block 2 is dropped, and 3-4 are not served after it
    assert tier.stats()["kv_tier_corrupt"] == 1 and not corrupt.exists()


@pytest.mark.parametrize("damage", ["torn", "empty", "header only", "older format"])
def test_a_torn_empty_or_older_format_file_is_refused_and_dropped(tmp_path: Path, damage: str):
    tier = DiskKVTier(tmp_path, "model-a", max_bytes=1 << 20)
    key = chain_keys("model-a", None, PROMPT, 16)[0]
    tier.put(key, torch.randn(2, 3, 16, 2, 8))
    path = next(tier.folder.glob("*.kv"))
    data = path.read_bytes()
    path.write_bytes({"torn": data[: len(data) // 2], "empty": b"", "header only": data[:64],
                      "older format": b"LOOMKV02" + data[8:]}[damage])
    reopened = DiskKVTier(tmp_path, "model-a", max_bytes=1 << 20)
    assert reopened.get(key) is None and reopened.stats()["kv_tier_corrupt"] == 1 and not path.exists()


def test_keys_chain_every_token_before_and_the_salt_and_the_budget_drops_the_least_recent(tmp_path: Path):
    a = chain_keys("m", None, PROMPT, 16)
    assert chain_keys("m", "tenant", PROMPT, 16)[0] != a[0]
    assert chain_keys("m", None, [7] + PROMPT[1:], 16)[3] != a[3]  # a changed first token changes every key
    assert chain_keys("m", None, PROMPT, 16, start=2, prev=a[1]) == a[2:]
    kv = torch.zeros(2, 1, 16, 1, 8)
    size = 2 * 16 * 8 * 4
    tier = DiskKVTier(tmp_path, "m", max_bytes=3 * (size + 100))
    for key in a:
        tier.put(key, kv)
    assert a[0] not in tier and all(k in tier for k in a[1:])


@pytest.fixture(scope="module")
def model() -> str:
    from loom.runtime.checkpoint import ensure_checkpoint

    return str(ensure_checkpoint("qwen3", "tiny"))


def _llm(model: str, tier: Path | None, blocks: int = 12):
    from loom.runtime import LLM

    return LLM(model, num_kv_blocks=blocks, block_size=16, max_model_len=512, max_num_seqs=4,
               kv_tier_dir=None if tier is None else str(tier))


def _greedy(retention: KVRetention | None = None) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, kv_retention=retention)


def _reference(model: str, prompt: list[int]) -> list[int]:
    llm = _llm(model, None, blocks=64)
    try:
        return list(llm.generate(prompt_token_ids=[prompt], sampling_params=_greedy(), use_tqdm=False)[0].token_ids)
    finally:
        llm.shutdown()


def test_a_pinned_session_evicted_under_pressure_is_loaded_from_disk_and_decodes_the_same(model, tmp_path):
    llm = _llm(model, tmp_path)
    try:
        first = llm.generate(prompt_token_ids=[PROMPT], sampling_params=_greedy(KVRetention("s", 60)),
                             use_tqdm=False)[0]
        follow = PROMPT + list(first.token_ids) + [5, 6, 7]
        # 10 blocks: beside the 7 free ones it takes 3 of the session's 5 pinned (4 full + its partial last),
        # the last ones first: the partial block (dropped: never full) and full blocks 3 and 2 (to disk)
        llm.generate(prompt_token_ids=[list(range(1000, 1150))], sampling_params=_greedy(), use_tqdm=False)
        assert llm.stats()["kv_tier_writes"] == 2
        again = llm.generate(prompt_token_ids=[follow], sampling_params=_greedy(), use_tqdm=False)[0]
    finally:
        llm.shutdown()
    assert again.num_cached_tokens == 64 and again.kv_tier_tokens == 32  # blocks 0-1 from the pool, 2-3 from disk
    assert list(again.token_ids) == _reference(model, follow)


def test_an_unpinned_cached_block_the_pool_evicts_goes_to_disk_and_is_loaded_back(model, tmp_path):
    """Not only a session's pinned blocks: any full cached block that must leave the pool is written, and a
    later prefix miss on it loads it (a plain LRU user of the tier keeps its prefixes through pressure too)."""
    llm = _llm(model, tmp_path)
    try:
        first = llm.generate(prompt_token_ids=[PROMPT], sampling_params=_greedy(), use_tqdm=False)[0]
        follow = PROMPT + list(first.token_ids) + [5, 6, 7]
        # 12 blocks: the 180-token request (and its 8 output tokens) takes all of them, so the 4 full blocks of
        # PROMPT are evicted (and its partial last block, never full, dropped)
        llm.generate(prompt_token_ids=[list(range(1000, 1180))], sampling_params=_greedy(), use_tqdm=False)
        assert llm.stats()["kv_tier_writes"] == 4
        again = llm.generate(prompt_token_ids=[follow], sampling_params=_greedy(), use_tqdm=False)[0]
    finally:
        llm.shutdown()
    assert again.kv_tier_tokens >= 48 and again.num_cached_tokens >= again.kv_tier_tokens
    assert list(again.token_ids) == _reference(model, follow)


def test_a_restarted_engine_reads_a_sessions_kv_from_the_tier_and_decodes_the_same(model, tmp_path):
    llm = _llm(model, tmp_path, blocks=32)
    try:
        first = llm.generate(prompt_token_ids=[PROMPT], sampling_params=_greedy(KVRetention("s", 60)),
                             use_tqdm=False)[0]
    finally:
        llm.shutdown()  # writes the pinned blocks
    follow = PROMPT + list(first.token_ids) + [5, 6, 7]
    restarted = _llm(model, tmp_path, blocks=32)
    try:
        again = restarted.generate(prompt_token_ids=[follow], sampling_params=_greedy(), use_tqdm=False)[0]
        salted = restarted.generate(prompt_token_ids=[follow], use_tqdm=False,
                                    sampling_params=SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True,
                                                                   cache_salt="another tenant"))[0]
    finally:
        restarted.shutdown()
    assert again.kv_tier_tokens == 64  # the prompt's 4 full blocks (the reply's block was never full)
    assert list(again.token_ids) == _reference(model, follow)
    assert salted.kv_tier_tokens == 0 and salted.num_cached_tokens == 0  # another salt never reads them


def test_a_request_waiting_for_blocks_reads_its_tier_files_once(tmp_path: Path):
    from loom.runtime.kv_cache_manager import KVCacheManager
    from loom.runtime.request import Request

    tier = DiskKVTier(tmp_path, "fp", max_bytes=1 << 20)
    for key in chain_keys("fp", None, PROMPT, 16)[:2]:
        tier.put(key, torch.zeros(2, 1, 16, 1, 8))
    kv = KVCacheManager(num_blocks=8, block_size=16, tier=tier)
    req = Request("r", list(PROMPT), SamplingParams(max_tokens=4), arrival_time=0.0, max_tokens=4)
    first = kv.get_computed_blocks(req)
    again = kv.get_computed_blocks(req)  # the scheduler looks a waiting request up every step
    assert first.num_tokens == again.num_tokens == 32 and len(again.loaded) == 2
    assert tier.stats()["kv_tier_reads"] == 2  # two blocks, read once
    assert kv.allocate_slots(req, req.num_tokens - 32, num_hit_tokens=32, loaded=again.loaded)
    assert req.tier_staged is None and len(kv.take_blocks_to_load()) == 2
