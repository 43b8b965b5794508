"""N-gram prompt-lookup proposer, SpeculativeConfig validation and the counters."""

from __future__ import annotations

import pytest

from loom.runtime.spec_decode import NgramProposer, SpecDecodeStats, SpecRequestStats, SpeculativeConfig


def test_longest_ngram_match_proposes_following_tokens() -> None:
    p = NgramProposer(k=3, min_n=1, max_n=3)
    #            0  1  2  3  4  5  6  7  8  9
    context = [5, 6, 7, 8, 9, 1, 2, 6, 7, 8]
    # suffix 3-gram [6, 7, 8] occurs at 1 -> tokens after it: 9, 1, 2
    assert p.propose(context) == [9, 1, 2]


def test_falls_back_to_shorter_ngram_when_long_one_is_absent() -> None:
    p = NgramProposer(k=2, min_n=1, max_n=3)
    context = [4, 1, 2, 3, 9, 9, 3]  # [9, 9, 3], [9, 3] unseen; [3] seen at 3
    assert p.propose(context) == [9, 9]


def test_no_match_proposes_nothing() -> None:
    p = NgramProposer(k=4, min_n=2, max_n=3)
    assert p.propose([1, 2, 3, 4, 5]) == []
    assert p.propose([7]) == []
    assert p.propose([]) == []


def test_prefers_most_recent_match_with_full_continuation() -> None:
    p = NgramProposer(k=2, min_n=1, max_n=1)
    # [1] occurs at 0 (-> 2, 3), at 4 (-> 5, 6), at 8 (-> 1: only one token left)
    context = [1, 2, 3, 0, 1, 5, 6, 0, 1, 1]
    assert p.propose(context) == [5, 6]


def test_short_continuation_when_only_a_recent_match_exists() -> None:
    p = NgramProposer(k=4, min_n=2, max_n=2)
    assert p.propose([8, 3, 4, 3, 4]) == [3, 4]  # match at 1, continuation runs into the suffix


def test_repeating_cycle_is_fully_predicted() -> None:
    cycle = [11, 12, 13, 14, 15]
    context = [1, 2] + cycle * 4
    p = NgramProposer(k=4, min_n=2, max_n=4)
    assert p.propose(context) == cycle[:4]


def test_k_cap_and_batch() -> None:
    p = NgramProposer(k=3, min_n=1, max_n=2)
    ctx = [1, 2, 3, 4, 1, 2]
    assert p.propose(ctx, k=1) == [3]
    assert p.propose(ctx, k=0) == []
    assert p.propose_batch([ctx, [9]], ks=[2, 3]) == [[3, 4], []]


@pytest.mark.parametrize("kwargs, field", [
    ({"method": "medusa"}, "method"),
    ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"prompt_lookup_min": 3, "prompt_lookup_max": 2}, "prompt_lookup_min"),
    ({"method": "draft_model"}, "draft_model"),
    ({"disable_by_batch_size": 0}, "disable_by_batch_size"),
    ({"draft_dtype": "int8"}, "draft_dtype"),
])
def test_invalid_speculative_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SpeculativeConfig(**kwargs)


def test_speculation_disabled_at_or_above_batch_threshold() -> None:
    cfg = SpeculativeConfig(disable_by_batch_size=4)
    assert cfg.enabled_for(3) and not cfg.enabled_for(4) and not cfg.enabled_for(32)
    assert SpeculativeConfig(disable_by_batch_size=None).enabled_for(10_000)


def test_acceptance_rate_and_mean_acceptance_length() -> None:
    s = SpecDecodeStats(num_spec_tokens=4)
    s.observe(4, 4)
    s.observe(4, 1)
    s.observe(2, 0)
    s.observe(0, 0)  # a request with no drafts is not a draft
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens) == (3, 10, 5)
    assert s.acceptance_rate == pytest.approx(0.5)
    assert s.mean_acceptance_length == pytest.approx(1 + 5 / 3)
    assert s.accepted_per_position == [2, 1, 1, 1]
    r = SpecRequestStats()
    r.observe(3, 2)
    assert (r.num_drafts, r.num_draft_tokens, r.num_accepted_tokens) == (1, 3, 2)
    assert s.as_dict()["spec_acceptance_rate"] == pytest.approx(0.5)
