"""The per-class ledger of every request of a real run reconciles with the engine's own counters."""

from __future__ import annotations

import json

import pytest

from loom import evals
from loom.evals.records import OUTPUT_CLASSES, PROMPT_CLASSES


@pytest.fixture(scope="module")
def prefix_run(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("prefix")
    return evals.run("prefix", model=tiny_model, out=out, num_requests=12, warmup=1, report=False,
                     options={"prefix_tokens": 96, "suffix_tokens": 16, "output_tokens": 8, "groups": 3},
                     engine={"device": "cpu", "num_kv_blocks": 1024})


def test_every_request_ledger_matches_engine_output(prefix_run):
    records = prefix_run.results[0].records
    assert len(records) == 12 and all(r["ok"] for r in records)
    for r in records:
        cls = r["classes"]
        prompt = sum(cls[c]["tokens"] for c in PROMPT_CLASSES)
        cached = sum(cls[c]["cached_tokens"] for c in PROMPT_CLASSES)
        assert prompt == r["prompt_tokens"]
        assert cached == r["cached_tokens"]  # RequestOutput.num_cached_tokens
        assert sum(cls[c]["tokens"] for c in OUTPUT_CLASSES) == r["output_tokens"] == len(r["output_ids"]) == 8
        # prefill time of the computed prompt tokens adds up to the engine's TTFT, decode time to its span
        assert sum(cls[c]["ms"] for c in PROMPT_CLASSES) == pytest.approx(r["engine_ttft_ms"])
        assert sum(cls[c]["ms"] for c in OUTPUT_CLASSES) == pytest.approx(r["engine_decode_ms"])
        # the class spans tile the prompt: system (shared prefix) first, then the user turn
        assert [s[0] for s in r["class_spans"]] == ["system", "user"]


def test_run_totals_match_engine_counters(prefix_run):
    vr = prefix_run.results[0]
    before, after = vr.stats_before, vr.stats_after
    records = vr.records
    assert sum(r["cached_tokens"] for r in records) == after["prefix_cache_hits"] - before["prefix_cache_hits"]
    assert sum(r["prompt_tokens"] for r in records) == after["prefix_cache_queries"] - before["prefix_cache_queries"]
    assert sum(r["output_tokens"] for r in records) == \
        after["num_generated_tokens"] - before["num_generated_tokens"]
    assert after["num_preemptions"] == before["num_preemptions"]
    summary = prefix_run.variants["base"]
    assert summary["prefix_cache"]["engine_hit_rate"] == pytest.approx(summary["prefix_cache"]["hit_rate"])
    assert summary["prefix_cache"]["hit_rate"] > 0.3  # shared system prompts are served from the cache
    classes = summary["classes"]
    assert sum(classes[c]["tokens"] for c in PROMPT_CLASSES) == summary["benchmark"]["total_input_tokens"]
    assert sum(classes[c]["share"] for c in PROMPT_CLASSES + OUTPUT_CLASSES) == pytest.approx(1.0)
    assert summary["cost"]["token_cost_usd"] == pytest.approx(sum(c["token_cost_usd"] for c in classes.values()))


def test_records_file_and_workload_repeat_exactly(prefix_run, tiny_model):
    lines = (prefix_run.out_dir / "base" / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["request_id"] for x in lines] == [r["request_id"] for r in prefix_run.results[0].records]
    from transformers import AutoTokenizer

    from loom.evals.workloads import build

    tok = AutoTokenizer.from_pretrained(tiny_model)
    opts = {"prefix_tokens": 96, "suffix_tokens": 16, "output_tokens": 8, "groups": 3}
    again = build("prefix", tok, seed=0, num_requests=12, warmup=1, options=opts)
    saved = json.loads((prefix_run.out_dir / "workload.json").read_text())
    assert again.to_dict() == saved


@pytest.fixture(scope="module")
def preempted_run(tiny_model, tmp_path_factory):
    # a KV pool too small for the 12 requests at once: the engine preempts and recomputes
    out = tmp_path_factory.mktemp("preempt")
    return evals.run("prefix", model=tiny_model, out=out, num_requests=12, warmup=0, report=False,
                     options={"prefix_tokens": 96, "suffix_tokens": 16, "output_tokens": 24, "groups": 3},
                     engine={"device": "cpu", "num_kv_blocks": 24, "block_size": 16})


def test_ledger_adds_up_to_the_engine_counters_under_preemption(preempted_run):
    vr = preempted_run.results[0]
    before, after = vr.stats_before, vr.stats_after
    records = vr.records
    assert all(r["ok"] for r in records)
    assert after["num_preemptions"] > before["num_preemptions"]
    assert sum(r["recompute_tokens"] for r in records) > 0
    queries = after["prefix_cache_queries"] - before["prefix_cache_queries"]
    hits = after["prefix_cache_hits"] - before["prefix_cache_hits"]
    assert sum(r["prompt_tokens"] + r["recompute_tokens"] for r in records) == queries
    assert sum(r["cached_tokens"] + r["recompute_cached_tokens"] for r in records) == hits
    for r in records:  # the ledger's recompute line carries the same tokens as the engine's output
        assert r["classes"]["recompute"]["tokens"] == r["recompute_tokens"]
        assert r["classes"]["recompute"]["cached_tokens"] == r["recompute_cached_tokens"]
    block = preempted_run.variants["base"]["prefix_cache"]
    assert block["recompute_tokens"] == sum(r["recompute_tokens"] for r in records)
