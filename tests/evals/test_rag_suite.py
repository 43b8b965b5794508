"""A real ``rag`` run: agent sessions over an ingested stdlib corpus (MiniLM + FAISS), SQLite memory, tools."""

from __future__ import annotations

import pytest

from loom import evals
from loom.evals.records import OUTPUT_CLASSES, PROMPT_CLASSES


@pytest.fixture(scope="module")
def rag_run(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("rag")
    index = tmp_path_factory.mktemp("rag-index")
    return evals.run("rag", model=tiny_model, out=out, num_requests=2, warmup=1, report=False,
                     options={"turns": 2, "output_tokens": 64, "corpus": "stdlib:module/json",
                              "index_dir": str(index)},
                     engine={"device": "cpu", "num_kv_blocks": 1024})


def test_rag_turns_split_tokens_into_agent_classes(rag_run):
    s = rag_run.variants["base"]
    assert s["benchmark"]["completed"] == 4 and s["benchmark"]["failed"] == 0
    classes = s["classes"]
    for name in ("system", "tools", "retrieval", "history", "user", "output", "tool_call", "tool_result"):
        assert classes[name]["tokens"] > 0, name
    forced = [r for r in rag_run.results[0].records if r["tool_choice"] == "required"]
    assert len(forced) == 2
    for r in forced:  # the forced call ran a real tool and its result went back to the model
        assert r["steps"] == 2 and len(r["tool_calls"]) == 1 and r["tool_calls"][0]
        assert r["classes"]["tool_result"]["tokens"] > 0
    for r in rag_run.results[0].records:
        prompt = sum(r["classes"][c]["tokens"] for c in PROMPT_CLASSES)
        assert prompt == r["prompt_tokens"]
        assert sum(r["classes"][c]["cached_tokens"] for c in PROMPT_CLASSES) == r["cached_tokens"]
        assert sum(r["classes"][c]["tokens"] for c in OUTPUT_CLASSES) == r["output_tokens"]
        assert r["steps"] >= 1 and r["final_state"] in ("done", "max_steps")


def test_rag_history_and_shared_header_come_from_the_prefix_cache(rag_run):
    s = rag_run.variants["base"]
    later = [r for r in rag_run.results[0].records if r["turn"] >= 1]
    for r in later:
        hist = r["classes"]["history"]
        assert hist["cached_tokens"] >= 0.9 * hist["tokens"] > 0
    # system prompt and tool schemas are identical for every agent: cached after the warm-up
    assert s["classes"]["tools"]["cached_tokens"] == s["classes"]["tools"]["tokens"]
    assert s["prefix_cache"]["hit_rate"] > 0.5
    assert s["prefix_cache"]["engine_hit_rate"] == pytest.approx(s["prefix_cache"]["hit_rate"])
