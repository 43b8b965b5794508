"""Bad input gets a clear error at submission and disturbs nobody: oversize
prompts, requests that could never fit the KV pool, invalid ``SamplingParams``
and ``EngineConfig`` fields, a full waiting queue, duplicate ids."""

from __future__ import annotations

import pytest

from loom.runtime import EngineConfig, SamplingParams
from loom.runtime.errors import ContextLengthError, InvalidRequestError, KVCapacityError, QueueFullError
from tests.runtime.helpers import assert_pool_idle, greedy, make_engine, random_prompts, run_to_completion


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.5),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("min_p", 1.5),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3.0),
        ("repetition_penalty", 0.0),
        ("max_tokens", 0),
        ("logprobs", -1),
        ("seed", 1.5),
        ("stop", [""]),
        ("stop_token_ids", [-1]),
        ("temperature", "hot"),
    ],
)
def test_invalid_sampling_params_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field) as info:
        SamplingParams(**{field: value})
    assert isinstance(info.value, InvalidRequestError) and info.value.param == field


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("block_size", 0),
        ("dtype", "int8"),
        ("device", "tpu"),
        ("max_num_seqs", -1),
        ("max_num_batched_tokens", 0),
        ("num_kv_blocks", 0),
        ("gpu_memory_utilization", 1.5),
        ("load_format", "pickle"),
        ("max_model_len", 0),
    ],
)
def test_invalid_engine_config_raises_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        EngineConfig(model="x", **{field: value})


def test_unknown_engine_argument_is_rejected_not_dropped():
    with pytest.raises(TypeError):
        EngineConfig(model="x", max_num_sequences=4)


def test_max_model_len_beyond_the_model_is_rejected(tiny_checkpoint):
    with pytest.raises(ValueError, match="max_model_len"):
        make_engine(tiny_checkpoint("qwen3"), max_model_len=10**6)


def test_bad_submissions_fail_fast_and_leave_running_requests_untouched(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    reference = make_engine(path, num_kv_blocks=6, max_model_len=128)
    prompts = random_prompts(reference.vocab_size, [30, 45], seed=31)
    subs = [(f"r{i}", p, greedy(16)) for i, p in enumerate(prompts)]
    expected = run_to_completion(reference, subs)

    engine = make_engine(path, num_kv_blocks=6, max_model_len=128, max_waiting=3)
    for rid, p, sp in subs:
        engine.add_request(p, sp, request_id=rid)
    engine.step()
    engine.step()
    with pytest.raises(ContextLengthError, match="max_model_len"):
        engine.add_request(list(range(129)), greedy(4))
    with pytest.raises(KVCapacityError, match="KV blocks"):
        engine.add_request(list(range(100)), greedy(4))  # 104 tokens > 6 blocks x 16
    with pytest.raises(InvalidRequestError, match="prompt_token_ids"):
        engine.add_request([], greedy(4))
    with pytest.raises(InvalidRequestError, match="prompt_token_ids"):
        engine.add_request([engine.vocab_size], greedy(4))
    with pytest.raises(InvalidRequestError, match="request_id"):
        engine.add_request([1, 2, 3], greedy(4), request_id="r0")
    with pytest.raises(ValueError, match="sampling_params"):
        engine.add_request([1, 2, 3], {"temperature": 0})
    for i in range(3):
        engine.add_request([1, 2, 3], greedy(1), request_id=f"q{i}")
    with pytest.raises(QueueFullError):
        engine.add_request([1, 2, 3], greedy(1), request_id="q3")
    outs = run_to_completion(engine)
    for rid in ("r0", "r1"):
        assert outs[rid].token_ids == expected[rid].token_ids
    assert sorted(outs) == ["q0", "q1", "q2", "r0", "r1"]
    assert_pool_idle(engine)


def test_output_stops_at_max_model_len(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"), max_model_len=40)
    (prompt,) = random_prompts(engine.vocab_size, [35], seed=32)
    out = run_to_completion(engine, [("a", prompt, greedy(20))])["a"]
    assert len(out.token_ids) == 5 and out.finish_reason == "length"
