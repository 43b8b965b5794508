"""Workloads and arrivals are deterministic from the seed; prompts grow append-only with exact spans."""

from __future__ import annotations

import statistics

import pytest
from transformers import AutoTokenizer

from loom.evals.prompts import PromptState
from loom.evals.runner import arrival_offsets
from loom.evals.workloads import SUITES, build


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_same_seed_same_workload_other_seed_other_workload(tok):
    for suite in SUITES:
        a, b = build(suite, tok, seed=3), build(suite, tok, seed=3)
        assert a.to_dict() == b.to_dict(), suite
    assert build("throughput", tok, seed=3).to_dict() != build("throughput", tok, seed=4).to_dict()


def test_suite_sizes_and_overrides(tok):
    wl = build("sessions", tok, seed=0, num_requests=3, options={"turns": 5})
    assert wl.num_requests == 15 and len(wl.warmup) == 2
    assert {len(c.turns) for c in wl.conversations} == {5}
    spec = build("spec", tok)
    assert [v["speculative"] for v in spec.variants] == ["off", "ngram"]
    with pytest.raises(ValueError, match="option 'turnz'"):
        build("sessions", tok, options={"turnz": 3})


def test_poisson_arrivals_are_seeded_with_the_requested_mean_rate():
    a = arrival_offsets(2000, rate=4.0, seed=1)
    assert a == arrival_offsets(2000, rate=4.0, seed=1)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.08)
    assert arrival_offsets(3, rate=None, seed=1) == [0.0, 0.0, 0.0]


def test_next_turn_prompt_starts_with_previous_prompt_plus_reply(tok):
    st = PromptState(tok, "You are terse.")
    ids1, spans1 = st.user_turn("first question")
    assert [s[0] for s in spans1] == ["system", "user"] and spans1[-1][2] == len(ids1)
    reply = tok.encode("an answer", add_special_tokens=False)
    st.add_reply(reply, "an answer")
    ids2, spans2 = st.user_turn("second question")
    assert ids2[: len(ids1) + len(reply)] == ids1 + reply
    assert [s[0] for s in spans2] == ["system", "history", "user"]
    assert [(s[1], s[2]) for s in spans2] == [(0, spans1[0][2]), (spans1[0][2], spans2[2][1]),
                                              (spans2[2][1], len(ids2))]
    # the chat template renders the same conversation to the same tokens
    rendered = tok.apply_chat_template(st.messages, add_generation_prompt=True, tokenize=False)
    assert tok.encode(rendered, add_special_tokens=False) == ids2
