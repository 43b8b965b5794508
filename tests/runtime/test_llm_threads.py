"""One ``LLM`` shared by many threads: correct outputs, batched steps, a clean engine."""

from __future__ import annotations

import asyncio
import threading

from loom.runtime import LLM
from loom.orchestrator.engine_client import EngineClient
from tests.runtime.helpers import assert_pool_idle, greedy, hf_greedy_many, random_prompts


def _recording(llm: LLM) -> list[set[str]]:
    """Record the request ids of every scheduled step."""
    steps: list[set[str]] = []
    schedule = llm.engine.scheduler.schedule

    def record():
        out = schedule()
        steps.append({s.request.request_id for s in out.scheduled})
        return out

    llm.engine.scheduler.schedule = record
    return steps


def test_threads_sharing_one_llm_get_their_own_outputs_and_share_steps(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    llm = LLM(str(path), num_kv_blocks=256, max_model_len=512)
    prompts = random_prompts(llm.engine.vocab_size, [9, 17, 12, 30, 5, 21, 14, 8], seed=5)
    steps = _recording(llm)
    results: dict[int, list] = {}
    barrier = threading.Barrier(4)

    def caller(k: int) -> None:
        barrier.wait()
        mine = prompts[2 * k:2 * k + 2]
        results[k] = llm.generate(prompt_token_ids=mine, sampling_params=greedy(16 + k), use_tqdm=False)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    for k in range(4):
        refs = hf_greedy_many(path, prompts[2 * k:2 * k + 2], [16 + k] * 2)
        assert [o.token_ids for o in results[k]] == refs
    assert any(len(step) > 2 for step in steps), "concurrent callers never shared a step"
    assert not llm.engine.has_unfinished_requests()
    assert_pool_idle(llm.engine)


def test_two_engine_clients_over_one_sync_llm_run_concurrently(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    llm = LLM(str(path), num_kv_blocks=256, max_model_len=512)
    a, b = EngineClient(llm), EngineClient(llm)
    prompts = random_prompts(llm.engine.vocab_size, [32, 32], seed=6)

    async def one(client: EngineClient, prompt: list[int]) -> list[int]:
        outs = [o async for o in client.stream(prompt, greedy(24))]
        return outs[-1].token_ids

    async def both():
        return await asyncio.wait_for(asyncio.gather(one(a, prompts[0]), one(b, prompts[1])), timeout=120)

    got = asyncio.run(both())
    assert got == hf_greedy_many(path, prompts, [24, 24])
    assert_pool_idle(llm.engine)
