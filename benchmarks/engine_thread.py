"""Decode rate of one model stepped on the main thread (``LLM.generate``) and on ``AsyncLLM``'s engine thread,
with and without letting go of the loading thread's OpenMP workers (:mod:`loom.runtime.threads`).

``python -m benchmarks.engine_thread [--model M] [--rounds 3] [--tokens 128]``: each side runs in a process
of its own (OpenMP's thread pools are per process), sides taking turns within every round; each process
loads the model, runs one warm-up request and then ``--repeats`` timed greedy requests of ``--tokens``
tokens at batch 1, and reports their median rate.  Prints the median over rounds per side and the ratios
to the main thread's, with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SIDES = ("main thread", "engine thread", "engine thread, workers kept")

_CHILD = r"""
import asyncio, json, statistics, sys, time
side, model, tokens, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import loom.runtime.async_llm as async_llm
from loom.runtime import LLM, SamplingParams
from loom.runtime.async_llm import AsyncLLM
params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
prompt = "Write a long story about a robot learning to paint."
rates = []
if side == "main thread":
    llm = LLM(model)
    for i in range(repeats + 1):
        t = time.perf_counter()
        llm.generate([prompt], params)
        rates.append(tokens / (time.perf_counter() - t))
else:
    if side.endswith("kept"):
        async_llm.release_openmp_threads = lambda: False
    engine = AsyncLLM(model)
    async def run():
        for i in range(repeats + 1):
            t = time.perf_counter()
            async for _ in engine.generate(prompt, params, request_id=f"r{i}"):
                pass
            rates.append(tokens / (time.perf_counter() - t))
    asyncio.run(run())
print(json.dumps(statistics.median(rates[1:])))
"""


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.engine_thread", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(args.rounds):
        for side in SIDES:
            out = subprocess.run([sys.executable, "-c", _CHILD, side, args.model, str(args.tokens), str(args.repeats)],
                                 capture_output=True, text=True, check=True)
            rates[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {side: statistics.median(r) for side, r in rates.items()}
    print(f"{args.model}, batch 1, {args.tokens} tokens, torch threads: Loom's default; "
          f"load average {os.getloadavg()[0]:.2f}")
    for side in SIDES:
        print(f"  {side:28s} {medians[side]:6.1f} tokens/s ({', '.join(f'{r:.1f}' for r in rates[side])})"
              f"  {medians[side] / medians['main thread']:.2f}x the main thread")
    return medians


if __name__ == "__main__":
    main()
