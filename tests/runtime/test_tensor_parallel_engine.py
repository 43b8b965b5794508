"""A tensor-parallel engine (``tensor_parallel_size=2``, two gloo worker processes) generates
exactly what transformers' ``model.generate`` does, greedy float32, token for token, under the
engine's features (prefix caching with partial-block copies, chunked prefill, a small pool that
preempts); the real SmolLM2 split three ways equals the one-process engine; a rank that dies fails
its step's requests with ``finish_reason="error"`` and every later one at once, never a hang.
"""

from __future__ import annotations

import os
import signal

import pytest

from loom.runtime import EngineConfig, SamplingParams
from loom.runtime.distributed.executor import TensorParallelExecutor
from loom.runtime.engine import LLMEngine
from tests.runtime.helpers import (
    assert_pool_idle,
    greedy,
    hf_greedy_many,
    make_engine,
    random_prompts,
    run_to_completion,
)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])  # q/k/v bias split; per-head q/k norm on local heads
def test_tp2_greedy_equals_transformers_generate(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    shared = random_prompts(4000, [40], seed=3)[0]
    prompts = random_prompts(4000, [23, 5, 61], seed=1) + [shared + [7, 8, 9], shared + [10, 11]]
    lengths = [12, 20, 8, 16, 16]
    expected = hf_greedy_many(path, prompts, lengths)
    # 48 tokens a step: the 61-token prompt is chunked; the fifth prompt copies the shared partial block
    engine = make_engine(path, tensor_parallel_size=2, max_num_batched_tokens=48, num_kv_blocks=64)
    try:
        assert isinstance(engine.runner, TensorParallelExecutor)
        first = run_to_completion(engine, [(str(i), p, greedy(n)) for i, (p, n) in
                                           enumerate(zip(prompts[:4], lengths[:4]))])
        second = run_to_completion(engine, [("4", prompts[4], greedy(lengths[4]))])
        outs = {**first, **second}
        assert [outs[str(i)].token_ids for i in range(5)] == expected
        assert outs["4"].num_cached_tokens >= len(shared)
        assert_pool_idle(engine)
    finally:
        engine.shutdown()


def test_tp3_real_model_equals_single_process_engine(real_model):
    """SmolLM2-135M has 9 query and 3 KV heads: three ranks of 3 and 1."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(real_model))
    texts = ["The capital of France is", "def fibonacci(n):", "Write a haiku about the sea."]
    prompts = [tok(t)["input_ids"] for t in texts]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)  # three processes on two cores
    one = make_engine(real_model)
    expected = run_to_completion(one, [(str(i), p, params) for i, p in enumerate(prompts)])
    three = make_engine(real_model, tensor_parallel_size=3)
    try:
        got = run_to_completion(three, [(str(i), p, params) for i, p in enumerate(prompts)])
    finally:
        three.shutdown()
    assert [got[str(i)].token_ids for i in range(3)] == [expected[str(i)].token_ids for i in range(3)]


def test_tp_size_that_does_not_divide_the_heads_is_a_clear_error(real_model):
    with pytest.raises(ValueError, match="num_attention_heads \\(9\\) is not divisible by 2"):
        LLMEngine(EngineConfig(model=str(real_model), tensor_parallel_size=2, num_kv_blocks=16))


def test_dead_rank_fails_requests_instead_of_hanging(arch_checkpoint):
    engine = make_engine(arch_checkpoint("llama"), tensor_parallel_size=2)
    try:
        run_to_completion(engine, [("warm", [1, 2, 3], greedy(2))])
        os.kill(engine.runner._procs[1].pid, signal.SIGKILL)
        outs = run_to_completion(engine, [("a", [4, 5, 6], greedy(4)), ("b", [7, 8], greedy(4))])
        assert {o.finish_reason for o in outs.values()} == {"error"}
        later = run_to_completion(engine, [("c", [9, 10], greedy(4))])
        assert later["c"].finish_reason == "error"
        assert_pool_idle(engine)
    finally:
        engine.shutdown()
