"""Two settings of one engine, decoded in interleaved rounds: the A/B loop the decode benchmarks share, and
the median timer of their per-matrix tables."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def median_ms(fn: Callable[[], object], n: int = 30) -> float:
    """Median wall time of ``n`` calls of ``fn`` after one warm-up call, in ms."""
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def chat_prompt(llm: Any, content: str = "Tell me about Python.") -> list[int]:
    """Token ids of a one-message chat prompt in ``llm``'s template."""
    text = llm.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                             add_generation_prompt=True)
    return list(llm.tokenizer(text, add_special_tokens=False)["input_ids"])


def interleaved_decode(llm: Any, prompt: list[int], switch: Callable[[str], None], sides: Sequence[str],
                       batch: int, rounds: int = 3, tokens: int = 64) -> dict[str, float]:
    """Median decode rate (tokens/s over the whole ``generate``) of ``batch`` copies of ``prompt`` for each
    side; ``switch(side)`` puts the engine in that side's setting before each warm-up and timed run, sides
    taking turns within every round."""
    from loom.runtime import SamplingParams

    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            switch(side)
            llm.generate(prompt_token_ids=[prompt], sampling_params=params, use_tqdm=False)  # warm
            t0 = time.perf_counter()
            llm.generate(prompt_token_ids=[prompt] * batch, sampling_params=params, use_tqdm=False)
            rates[side].append(batch * tokens / (time.perf_counter() - t0))
    return {side: statistics.median(r) for side, r in rates.items()}
