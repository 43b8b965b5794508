"""Constrained decoding through the engine, from a random-weight model.

Every constrained output must parse and validate; constrained and
unconstrained requests share batches without changing each other's tokens; a
schema that cannot compile is a ``ValueError`` at submission; with
speculation, drafted tokens the grammar rejects are cut before verification.
"""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from loom.runtime import SamplingParams
from loom.runtime.spec_decode import SpeculativeConfig
from loom.runtime.structured_output import StructuredOutputParams
from tests.runtime.helpers import assert_pool_idle, make_engine, run_to_completion
from tests.runtime.test_structured_output import LARK, LARK_EQUIV, ORDER, PERSON, REGEX, TOOLS
from loom.runtime.structured_output import tool_call_schema

SCHEMAS = [PERSON, ORDER, tool_call_schema(TOOLS), tool_call_schema(TOOLS, name="calculator")]


def _constrained(i: int) -> tuple[StructuredOutputParams, object]:
    kind = i % 6
    if kind < 4:
        return StructuredOutputParams(json=SCHEMAS[kind]), SCHEMAS[kind]
    if kind == 4:
        return StructuredOutputParams(regex=REGEX), re.compile(REGEX)
    return StructuredOutputParams(grammar=LARK), LARK_EQUIV


def _check(text: str, spec: object) -> None:
    if isinstance(spec, dict):
        jsonschema.validate(json.loads(text), spec)
    else:
        assert spec.fullmatch(text), text


def _text(engine, out) -> str:
    """The output's text from its token ids (EOS dropped)."""
    ids = [t for t in out.token_ids if t not in engine.eos_token_ids]
    return engine.tokenizer.decode(ids)


def _unconstrained(vocab: int, n: int) -> list[tuple[str, list[int], SamplingParams]]:
    rng = random.Random(1)
    return [(f"u{i}", [rng.randrange(vocab) for _ in range(5 + 7 * i)],
             SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)) for i in range(n)]


@pytest.mark.parametrize("speculative", [False, True])
def test_200_constrained_generations_from_random_weights_all_validate(tiny_checkpoint,
                                                                     speculative: bool) -> None:
    path = tiny_checkpoint("qwen3")
    spec = SpeculativeConfig(num_speculative_tokens=3, disable_by_batch_size=None) if speculative else None
    engine = make_engine(path, speculative_config=spec, num_kv_blocks=2048, max_num_batched_tokens=4096)
    rng = random.Random(0)
    subs, checks = [], {}
    for i in range(200):
        params, check = _constrained(i)
        prompt = [rng.randrange(engine.vocab_size - 16) for _ in range(rng.randrange(3, 30))]
        subs.append((f"c{i}", prompt, SamplingParams(temperature=1.0, seed=i, max_tokens=300,
                                                     structured_output=params)))
        checks[f"c{i}"] = check
    plain = _unconstrained(engine.vocab_size, 12)
    outs = run_to_completion(engine, subs + plain)
    for rid, check in checks.items():
        out = outs[rid]
        assert out.finish_reason == "stop", (rid, out.text)
        _check(_text(engine, out), check)
    # the unconstrained requests are unchanged by sharing the batch
    alone = run_to_completion(make_engine(path), plain)
    for rid, _, _ in plain:
        assert outs[rid].token_ids == alone[rid].token_ids
    assert_pool_idle(engine)


def test_uncompilable_schema_is_a_value_error_at_submission_and_the_batch_goes_on(
        tiny_checkpoint) -> None:
    path = tiny_checkpoint("qwen3")
    engine = make_engine(path)
    plain = _unconstrained(engine.vocab_size, 4)
    for rid, prompt, params in plain:
        engine.add_request(prompt, params, request_id=rid)
    engine.step()
    engine.step()
    bad = SamplingParams(structured_output=StructuredOutputParams(json={"type": "no-such-type"}))
    with pytest.raises(ValueError, match="structured_output.json"):
        engine.add_request([1, 2, 3], bad, request_id="bad")
    with pytest.raises(ValueError, match="structured_output.regex"):
        engine.add_request([1, 2, 3], SamplingParams(
            structured_output=StructuredOutputParams(regex="(unclosed")), request_id="bad2")
    outs = run_to_completion(engine)
    alone = run_to_completion(make_engine(path), plain)
    assert set(outs) == {rid for rid, _, _ in plain}
    for rid in outs:
        assert outs[rid].token_ids == alone[rid].token_ids
    assert_pool_idle(engine)


def test_drafts_the_grammar_rejects_are_cut_before_verification(tiny_checkpoint) -> None:
    path = tiny_checkpoint("qwen3")
    spec = SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=1, disable_by_batch_size=None)
    engine = make_engine(path, speculative_config=spec)
    tok = engine.tokenizer
    # the prompt continues "hello" with " moon"; the grammar only allows " world"
    prompt = tok.encode("hello moon, hello moon, hello moon, hello moon", add_special_tokens=False)
    pattern = r"(hello world ){4}"
    params = SamplingParams(temperature=0.0, max_tokens=60,
                            structured_output=StructuredOutputParams(regex=pattern))
    outs = run_to_completion(engine, [("g", prompt, params)])
    assert re.fullmatch(pattern, _text(engine, outs["g"]))
    stats = engine.stats()
    assert stats["spec_num_grammar_rejected_tokens"] > 0
    assert outs["g"].finish_reason == "stop"


def test_constrained_greedy_output_is_the_same_with_and_without_speculation(tiny_checkpoint) -> None:
    path = tiny_checkpoint("qwen3")
    schema = ORDER
    subs = [(f"j{i}", [5 + i, 17, 99, 5 + i, 17, 99, 5 + i, 17],
             SamplingParams(temperature=0.0, max_tokens=300,
                            structured_output=StructuredOutputParams(json=schema))) for i in range(4)]
    base = run_to_completion(make_engine(path), subs)
    spec = SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=1, disable_by_batch_size=None)
    engine = make_engine(path, speculative_config=spec)
    outs = run_to_completion(engine, subs)
    for rid in base:
        assert outs[rid].token_ids == base[rid].token_ids
        jsonschema.validate(json.loads(_text(engine, outs[rid])), schema)
    assert engine.stats()["spec_num_draft_tokens"] > 0
