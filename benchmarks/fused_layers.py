"""The fused CPU layer path of quantized models against the eager one, in the engine.

``python -m benchmarks.fused_layers [THREADS] [MODEL] [METHODS]`` (default 1 thread, the default model,
``int4,int8``): greedy decode at batch 1 and 8, 64 tokens a sequence after a short chat prompt, three interleaved
rounds with the fused path (``loom.runtime.models.fused_forward``) on and off; median tokens/s and the ratio,
and the machine's load average before the run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch


def decode(model_name: str = "smollm2-135m-instruct", methods: tuple[str, ...] = ("int4", "int8"), rounds: int = 3,
           tokens: int = 64, batches: tuple[int, ...] = (1, 8)) -> None:
    from benchmarks.decode_ab import chat_prompt, interleaved_decode
    from loom.runtime import LLM

    for method in methods:
        llm = LLM(model_name, quantization=method, max_model_len=1024)
        model = llm.engine.runner.model.model  # type: ignore[union-attr]

        def switch(side: str, model: Any = model) -> None:
            model.fused = None if side == "fused" else False

        prompt = chat_prompt(llm)
        for batch in batches:
            rate = interleaved_decode(llm, prompt, switch, ("eager", "fused"), batch, rounds, tokens)
            assert model.fused, "the fused path did not run (no kernel build?)"
            e, f = rate["eager"], rate["fused"]
            print(f"{model_name} {method} batch {batch}: eager {e:.1f} tok/s, fused {f:.1f} ({f / e:.2f}x; medians of "
                  f"{rounds} interleaved rounds of {tokens} tokens a sequence)")
        llm.shutdown()


def main() -> None:
    args = sys.argv[1:]
    torch.set_num_threads(int(args[0]) if args else 1)
    print(f"threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
    with torch.inference_mode():
        decode(args[1] if len(args) > 1 else "smollm2-135m-instruct",
               tuple(args[2].split(",")) if len(args) > 2 else ("int4", "int8"))


if __name__ == "__main__":
    main()
