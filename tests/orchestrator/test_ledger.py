"""Token-class ledger: exact cached split, time attribution, costs, usage mappings."""

from __future__ import annotations

import pytest

from loom.orchestrator.ledger import Ledger, PriceTable

SPANS = [("system", 0, 10), ("tools", 10, 30), ("history", 30, 70), ("retrieval", 70, 90), ("user", 90, 100)]


def _call(cached: int = 45) -> Ledger:
    return Ledger.for_call(
        SPANS, cached, ["reasoning", "reasoning", "tool_call", "output", "output"],
        arrival_time=100.0, first_token_time=100.5, token_times=[100.5, 100.6, 100.8, 100.9, 101.3],
        finish_time=101.3, spec_rejected=3, prices=PriceTable(input=2.0, cached_input=0.5, output=8.0))


def test_cached_share_of_each_class_is_exact_from_spans() -> None:
    led = _call(cached=45)
    p = led.prompt
    assert (p["system"].cached_tokens, p["system"].computed_tokens) == (10, 0)
    assert (p["tools"].cached_tokens, p["tools"].computed_tokens) == (20, 0)
    assert (p["history"].cached_tokens, p["history"].computed_tokens) == (15, 25)
    assert (p["retrieval"].cached_tokens, p["user"].computed_tokens) == (0, 10)
    assert led.cached_tokens == 45 and led.prompt_tokens == 100


def test_classes_sum_to_totals_and_time_is_attributed() -> None:
    led = _call()
    assert sum(u.tokens for u in led.prompt.values()) == led.prompt_tokens == 100
    assert sum(o.tokens for o in led.output.values()) == led.completion_tokens == 5
    assert led.output["reasoning"].tokens == 2 and led.output["tool_call"].tokens == 1
    # prefill 500 ms over 55 computed tokens: history has 25 of them
    assert led.prompt["history"].prefill_ms == pytest.approx(500.0 * 25 / 55)
    assert led.prompt["system"].prefill_ms == 0.0
    assert sum(u.prefill_ms for u in led.prompt.values()) == pytest.approx(led.ttft_ms) == pytest.approx(500.0)
    assert led.output["reasoning"].decode_ms == pytest.approx(100.0)
    assert led.output["tool_call"].decode_ms == pytest.approx(200.0)
    assert led.output["output"].decode_ms == pytest.approx(500.0)
    assert led.e2e_ms == pytest.approx(1300.0) and led.spec_rejected == 3


def test_cost_uses_price_table() -> None:
    led = _call()
    assert led.prompt["history"].cost == pytest.approx((15 * 0.5 + 25 * 2.0) / 1e6)
    assert led.output["reasoning"].cost == pytest.approx(2 * 8.0 / 1e6)
    assert led.cost == pytest.approx((45 * 0.5 + 55 * 2.0 + 5 * 8.0) / 1e6)


def test_openai_and_langchain_usage_mappings_are_exact() -> None:
    led = _call()
    assert led.to_openai_usage() == {
        "prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
        "prompt_tokens_details": {"cached_tokens": 45},
        "completion_tokens_details": {"reasoning_tokens": 2}}
    assert led.to_langchain_usage() == {
        "input_tokens": 100, "output_tokens": 5, "total_tokens": 105,
        "input_token_details": {"cache_read": 45}, "output_token_details": {"reasoning": 2}}
    from langchain_core.messages.ai import UsageMetadata  # the mapping is a valid UsageMetadata
    assert set(led.to_langchain_usage()) <= set(UsageMetadata.__annotations__)


def test_run_ledger_is_the_classwise_sum_of_calls() -> None:
    a, b = _call(cached=0), _call(cached=99)
    run = Ledger.sum([a, b])
    assert run.num_calls == 2 and run.calls == [a, b]
    assert run.prompt_tokens == 200 and run.cached_tokens == 99
    for name in run.prompt:
        assert run.prompt[name].tokens == a.prompt[name].tokens + b.prompt[name].tokens
    assert run.cost == pytest.approx(a.cost + b.cost)
    assert run.to_dict(with_calls=True)["calls"][1]["cached_tokens"] == 99


def test_spans_must_tile_the_prompt() -> None:
    with pytest.raises(ValueError, match="spans"):
        Ledger.for_call([("system", 0, 5), ("user", 6, 9)], 0, [])
    with pytest.raises(ValueError, match="unknown prompt class"):
        Ledger.for_call([("bogus", 0, 5)], 0, [])


def test_recompute_after_preemption_is_its_own_priced_line_outside_the_prompt() -> None:
    prices = PriceTable(input=2.0, cached_input=0.5, output=8.0)
    led = Ledger.for_call(SPANS, 45, ["output"] * 4, recompute_tokens=130, recompute_cached_tokens=96,
                          prices=prices)
    assert led.prompt_tokens == 100 and led.cached_tokens == 45  # the prompt is unchanged
    assert (led.recompute.cached_tokens, led.recompute.computed_tokens) == (96, 34)
    assert led.lookup_tokens == 230 and led.lookup_hit_tokens == 141
    assert led.recompute.cost == pytest.approx((96 * 0.5 + 34 * 2.0) / 1e6)
    total = Ledger.sum([led, led])
    assert total.recompute.tokens == 260 and total.lookup_hit_tokens == 282
    assert total.cost == pytest.approx(2 * led.cost)
    assert led.to_dict()["recompute"]["tokens"] == 130
