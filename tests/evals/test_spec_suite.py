"""A real ``spec`` run: speculative decoding off and on, same requests, same seeds."""

from __future__ import annotations

import pytest

from loom import evals


@pytest.fixture(scope="module")
def spec_run(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("spec")
    return evals.run("spec", model=tiny_model, out=out, num_requests=4, warmup=1, report=False,
                     options={"prompt_tokens": 96, "output_tokens": 32},
                     engine={"device": "cpu", "num_kv_blocks": 1024})


def test_speculation_is_lossless_and_counts_reconcile_with_the_engine(spec_run):
    off, on = spec_run.results
    assert (off.name, on.name) == ("speculative=off", "speculative=ngram,num_speculative_tokens=4")
    key = lambda r: r["conversation"]  # noqa: E731
    assert {key(r): r["output_ids"] for r in off.records} == {key(r): r["output_ids"] for r in on.records}
    s = spec_run.variants[on.name]["spec"]
    assert s["num_drafts"] > 0 and s["num_draft_tokens"] >= s["num_accepted_tokens"]
    before, after = on.stats_before, on.stats_after
    assert s["num_drafts"] == after["spec_num_drafts"] - before["spec_num_drafts"]
    assert s["num_accepted_tokens"] == after["spec_num_accepted_tokens"] - before["spec_num_accepted_tokens"]
    assert s["acceptance_rate"] == pytest.approx(s["num_accepted_tokens"] / s["num_draft_tokens"])
    assert s["mean_acceptance_length"] == pytest.approx(1 + s["num_accepted_tokens"] / s["num_drafts"])
    per_pos = s["accepted_per_position"]
    assert len(per_pos) == 4 and all(a >= b for a, b in zip(per_pos, per_pos[1:]))
    assert spec_run.variants[off.name]["spec"]["num_drafts"] == 0


def test_itl_counts_chunks_and_tpot_counts_tokens_under_speculation(spec_run):
    on = spec_run.results[1]
    for r in on.records:
        assert sum(r["chunk_tokens"]) == r["output_tokens"] == 32
        assert len(r["itl_ms"]) == len(r["chunk_tokens"]) - 1
        assert r["tpot_ms"] == pytest.approx((r["e2el_ms"] - r["ttft_ms"]) / 31)
        assert r["classes"]["spec_rejected"]["tokens"] == r["num_draft_tokens"] - r["num_accepted_tokens"]
    # accepted drafts arrive together: some chunks carry several tokens
    assert any(n > 1 for r in on.records for n in r["chunk_tokens"])
