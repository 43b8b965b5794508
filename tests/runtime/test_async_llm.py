"""AsyncLLM: streamed deltas add up, concurrent streams equal transformers,
aborts (explicit, consumer break, task cancel, shutdown) free every block and
leave the other requests unchanged; submission errors raise in the caller."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from loom.runtime import AsyncLLM, LLM, SamplingParams
from loom.runtime.errors import ContextLengthError
from tests.runtime.helpers import greedy, hf_greedy, hf_greedy_many, random_prompts


@pytest.fixture
def allm(tiny_checkpoint):
    engine = AsyncLLM(str(tiny_checkpoint("qwen3")), num_kv_blocks=256, max_model_len=512, max_num_batched_tokens=64)
    yield engine
    engine.shutdown()


# Streams that get aborted ask for this many tokens (~1.5 ms a step alone), so
# the request cannot end by length before the abort reaches the engine thread,
# even on a stalled event loop: the abort tests do not depend on step speed.
UNFINISHABLE = 3000


@pytest.fixture
def allm_long(tiny_checkpoint):
    """``allm`` with room for ``UNFINISHABLE``-token outputs (256 blocks x 16 = 4096 tokens)."""
    engine = AsyncLLM(str(tiny_checkpoint("qwen3")), num_kv_blocks=256, max_model_len=4096, max_num_batched_tokens=64)
    yield engine
    engine.shutdown()


async def _wait_idle(allm: AsyncLLM, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = allm.stats()
        if stats["num_running"] == 0 and stats["num_waiting"] == 0 and stats["kv_blocks_free"] == stats["kv_blocks_total"]:
            return stats
        await asyncio.sleep(0.02)
    raise AssertionError(f"engine not idle: {allm.stats()}")


async def _collect(allm: AsyncLLM, prompt, params, rid=None):
    outs = [out async for out in allm.generate(prompt_token_ids=prompt, sampling_params=params, request_id=rid)]
    return outs


async def test_stream_deltas_add_up_to_the_final_output(allm, tiny_checkpoint):
    (prompt,) = random_prompts(allm.engine.vocab_size, [25], seed=41)
    outs = await _collect(allm, prompt, greedy(12))
    final = outs[-1]
    assert final.finished and not any(o.finished for o in outs[:-1])
    assert sum((o.new_token_ids for o in outs), []) == final.token_ids
    assert "".join(o.new_text for o in outs) == final.text
    assert final.token_ids == hf_greedy(tiny_checkpoint("qwen3"), prompt, 12)
    assert len(final.token_times) == 12 and final.first_token_time == final.token_times[0]
    assert final.arrival_time <= final.first_token_time <= final.finish_time


async def test_concurrent_streams_with_aborts_leave_others_equal_to_transformers(allm_long, tiny_checkpoint):
    allm = allm_long
    path = tiny_checkpoint("qwen3")
    prompts = random_prompts(allm.engine.vocab_size, [20, 35, 50, 12, 28, 40], seed=42)

    async def full(i):
        return (await _collect(allm, prompts[i], greedy(14), f"r{i}"))[-1]

    async def breaks_early(i):
        async for out in allm.generate(prompt_token_ids=prompts[i], sampling_params=greedy(14), request_id=f"r{i}"):
            if len(out.token_ids) >= 3:
                break

    async def aborted_by_id(i):  # aborts after its 2nd streamed output
        outs = []
        async for out in allm.generate(prompt_token_ids=prompts[i], sampling_params=greedy(UNFINISHABLE), request_id=f"r{i}"):
            outs.append(out)
            if len(out.token_ids) == 2:
                await allm.abort(f"r{i}")
        return outs[-1]

    streaming = asyncio.Event()

    async def cancelled(i):  # cancelled once its 1st output has streamed
        async for _ in allm.generate(prompt_token_ids=prompts[i], sampling_params=greedy(UNFINISHABLE), request_id=f"r{i}"):
            streaming.set()

    cancel_task = asyncio.create_task(cancelled(5))
    results = asyncio.gather(full(0), breaks_early(1), full(2), aborted_by_id(3), full(4))
    await streaming.wait()
    cancel_task.cancel()
    r0, _, r2, r3, r4 = await results
    with pytest.raises(asyncio.CancelledError):
        await cancel_task
    assert r3.finish_reason == "abort" and 2 <= len(r3.token_ids) < UNFINISHABLE
    refs = hf_greedy_many(path, [prompts[0], prompts[2], prompts[4]], [14] * 3)
    assert [r0.token_ids, r2.token_ids, r4.token_ids] == refs
    await _wait_idle(allm)
    allm.engine.kv.check_invariants([])


async def test_submission_errors_raise_in_the_caller_and_engine_keeps_serving(allm):
    with pytest.raises(ContextLengthError):
        await _collect(allm, list(range(600)), greedy(4))
    with pytest.raises(ValueError, match="temperature"):
        await _collect(allm, [1, 2, 3], SamplingParams(temperature=-1))
    outs = await _collect(allm, [1, 2, 3], greedy(3))
    assert outs[-1].finish_reason == "length"


async def test_event_loop_stays_responsive_while_the_engine_steps(allm):
    # Each forward sleeps 0.3 s (as a GPU forward releases the GIL).  A loop that waited
    # for model steps could not tick while a forward runs; a loop that stays free ticks
    # during every one of them, however slow the machine (no bound on elapsed time).
    step_s = 0.3
    forward = allm.engine.runner.execute_model
    in_forward = threading.Event()
    ticks_per_forward: list[int] = []
    ticks = 0

    def slow_forward(*args, **kwargs):
        start = ticks
        in_forward.set()
        time.sleep(step_s)
        in_forward.clear()
        ticks_per_forward.append(ticks - start)
        return forward(*args, **kwargs)

    allm.engine.runner.execute_model = slow_forward
    stop = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.005)
            ticks += in_forward.is_set()

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(_collect(allm, [1 + i, 2, 3], greedy(3)) for i in range(2)))
    stop.set()
    await tick
    assert len(ticks_per_forward) >= 3  # the streams really waited on several slow steps
    assert min(ticks_per_forward) > 0, f"the event loop stalled through a forward: {ticks_per_forward}"


async def test_a_request_id_reused_after_an_abort_gets_its_own_stream(allm_long):
    prompt = [5, 6, 7, 8]
    stream = allm_long.generate(prompt_token_ids=prompt, sampling_params=greedy(UNFINISHABLE), request_id="same")
    await stream.__anext__()
    await stream.aclose()  # posts the abort of the first "same"
    outs = await _collect(allm_long, prompt, greedy(6), rid="same")
    assert [o.request_id for o in outs] == ["same"] * len(outs)
    assert outs[-1].finish_reason == "length" and len(outs[-1].token_ids) == 6
    await _wait_idle(allm_long)


async def test_an_explicit_abort_by_request_id_ends_that_stream(allm_long):
    stream = allm_long.generate(prompt_token_ids=[1, 2, 3], sampling_params=greedy(UNFINISHABLE), request_id="x")
    first = await stream.__anext__()
    assert first.request_id == "x"
    await allm_long.abort("x")
    outs = [o async for o in stream]
    assert outs[-1].finish_reason == "abort"
    await _wait_idle(allm_long)


async def test_shutdown_ends_in_flight_streams_with_abort(tiny_checkpoint):
    allm = AsyncLLM(str(tiny_checkpoint("qwen3")), num_kv_blocks=160, max_model_len=4096)
    stream = allm.generate(prompt_token_ids=[1, 2, 3], sampling_params=greedy(2000))
    first = await stream.__anext__()
    assert not first.finished
    await asyncio.get_running_loop().run_in_executor(None, allm.shutdown)
    rest = [out async for out in stream]
    assert rest[-1].finish_reason == "abort"


def test_llm_generate_returns_outputs_in_prompt_order(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    llm = LLM(str(path), num_kv_blocks=128, max_model_len=256)
    prompts = random_prompts(llm.engine.vocab_size, [9, 30, 4], seed=44)
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=[greedy(3), greedy(5), greedy(7)])
    assert [len(o.token_ids) for o in outs] == [3, 5, 7]
    assert [o.prompt_token_ids for o in outs] == prompts
    text_outs = llm.generate(["def main():", "import os"], greedy(4), use_tqdm=False)
    assert text_outs[0].prompt_token_ids == llm.tokenizer.encode("def main():")
    assert set(llm.stats()) >= {
        "kv_blocks_total", "kv_blocks_free", "kv_blocks_cached", "prefix_cache_queries",
        "prefix_cache_hits", "num_preemptions", "num_running", "num_waiting",
    }
