"""A stateless client (the official ``openai`` client, resending the whole conversation every
turn) gets the previous turn's prompt and reply from the prefix cache.

Real default model, sampled replies (temperature 1, a seed per turn), eight
turns.  From turn 2 on, ``cached_tokens`` must cover at least 90% of the
previous turn's ``prompt_tokens + completion_tokens``: the reply's exact
generated ids are reused (loom.orchestrator.reuse) and the previous request's
partial last KV block is kept (runtime KV tails).
"""

from __future__ import annotations

from benchmarks.stateless import conversation, reuse_counters


def test_eight_turn_stateless_conversation_gets_90_percent_of_the_previous_turn_from_the_cache(
        real_client, real_server):
    applied_before = reuse_counters(real_server.url).get("applied", 0.0)
    ratios = conversation(real_client, max_tokens=24)  # sampled replies; the benchmark runs 48 tokens
    assert len(ratios) == 7
    assert min(ratios) >= 0.9, [round(x, 3) for x in ratios]
    # every turn after the first found its previous reply's ids (reported in /metrics)
    assert reuse_counters(real_server.url).get("applied", 0.0) - applied_before >= 7


def test_a_constrained_reply_resent_as_text_keeps_its_generated_ids(real_client, real_server):
    """A grammar-constrained reply is often spelled with other ids than its text re-tokenizes to
    (here 7 generated ids, 8 re-tokenized); resent by the client, its exact ids still come from the cache."""
    messages = [{"role": "user", "content": "Write the word banana three times, then a number."}]
    first = real_client.chat.completions.create(model="loom", messages=messages, max_tokens=40, temperature=0.0,
                                                extra_body={"guided_regex": "[a-z]{20}"})
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Now say it again."}]
    second = real_client.chat.completions.create(model="loom", messages=messages, max_tokens=8, temperature=0.0)
    previous = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= previous - 1  # all but the last sampled token
