"""The fused CPU layer path of quantized models against the eager one, in the engine.

``python -m benchmarks.fused_layers [THREADS] [MODEL] [METHODS]`` (default 1 thread, the default model,
``int4,int8``): greedy decode at batch 1 and 8, 64 tokens a sequence after a short chat prompt, three interleaved
rounds with the fused path (``loom.runtime.models.fused_forward``) on and off; median tokens/s and the ratio,
and the machine's load average before the run.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch


def decode(model_name: str = "smollm2-135m-instruct", methods: tuple[str, ...] = ("int4", "int8"), rounds: int = 3,
           tokens: int = 64, batches: tuple[int, ...] = (1, 8)) -> None:
    from loom.runtime import LLM, SamplingParams

    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    for method in methods:
        llm = LLM(model_name, quantization=method, max_model_len=1024)
        model = llm.engine.runner.model.model  # type: ignore[union-attr]
        text = llm.tokenizer.apply_chat_template([{"role": "user", "content": "Tell me about Python."}],
                                                 tokenize=False, add_generation_prompt=True)
        prompt = llm.tokenizer(text, add_special_tokens=False)["input_ids"]
        for batch in batches:
            rates: dict[str, list[float]] = {"eager": [], "fused": []}
            for _ in range(rounds):
                for which in ("eager", "fused"):
                    model.fused = None if which == "fused" else False
                    llm.generate(prompt_token_ids=[prompt], sampling_params=params, use_tqdm=False)  # warm
                    t0 = time.perf_counter()
                    llm.generate(prompt_token_ids=[prompt] * batch, sampling_params=params, use_tqdm=False)
                    rates[which].append(batch * tokens / (time.perf_counter() - t0))
            assert model.fused, "the fused path did not run (no kernel build?)"
            e, f = statistics.median(rates["eager"]), statistics.median(rates["fused"])
            print(f"{model_name} {method} batch {batch}: eager {e:.1f} tok/s, fused {f:.1f} ({f / e:.2f}x; medians of {rounds} "
                  f"interleaved rounds of {tokens} tokens a sequence)")
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
