"""Loom's int4 decode kernel against PyTorch's ``_weight_int4pack_mm_for_cpu``, per matrix and in the engine.

``python -m benchmarks.int4_linear [THREADS] [--decode [MODEL ...]]`` (default 1 thread):

* per matrix: the int4 shapes of SmolLM2-135M, Qwen2.5-Coder-0.5B and 1.5B at 1 row (bfloat16 in and out, as
  the fused layer path calls them), both kernels timed one after the other per case: median ms of 30 calls,
  the ratio, and the bytes read per second (4-bit codes, group 32, plus PyTorch's bfloat16 scales and zeros
  or Loom's 8-bit codes and exponents);
* ``--decode``: greedy decode of each model (default: the default model) in int4 at batch 1 and 8, 64 tokens a
  sequence after a short chat prompt, five interleaved rounds with each layer in Loom's tile layout and in
  PyTorch's; median tokens/s and the ratio, and the machine's load average.
"""

from __future__ import annotations

import os
import sys

import torch

from benchmarks.decode_ab import median_ms
from loom.runtime.kernels import cpu_int4_linear
from loom.runtime.quantization.int4 import Int4Linear, to_tiles, unpack_codes

SHAPES = {"smollm2 gate_up": (3072, 576), "smollm2 down": (576, 1536), "qwen-0.5b qkv": (1152, 896),
          "qwen-0.5b gate_up": (9728, 896), "qwen-0.5b down": (896, 4864), "qwen-1.5b gate_up": (17920, 1536),
          "qwen-1.5b down": (1536, 8960)}


def per_matrix() -> None:
    print(f"{'matrix':<18} {'pytorch ms':>10} {'loom ms':>8} {'ratio':>6} {'pytorch GB/s':>12} {'loom GB/s':>9}")
    for name, (n, k) in SHAPES.items():
        theirs = Int4Linear.from_float(torch.randn(n, k) * 0.05, None, 32)
        ours = Int4Linear.from_float(torch.randn(n, k) * 0.05, None, 32)
        assert ours.use_tiles()
        x = torch.randn(1, k).bfloat16()
        t_theirs, t_ours = median_ms(lambda: theirs.matmul(x)), median_ms(lambda: ours.matmul(x))
        gb_theirs, gb_ours = n * k * (0.5 + 4 / 32) / 1e9, n * k * (0.5 + 2 / 32 + 2 / 256) / 1e9
        print(f"{name:<18} {t_theirs:>10.3f} {t_ours:>8.3f} {t_theirs / t_ours:>6.2f} "
              f"{gb_theirs / t_theirs * 1e3:>12.1f} {gb_ours / t_ours * 1e3:>9.1f}")


def decode(models: list[str], rounds: int = 5, tokens: int = 64, batches: tuple[int, ...] = (1, 8)) -> None:
    from benchmarks.decode_ab import chat_prompt, interleaved_decode
    from loom.runtime import LLM
    from loom.runtime import quantization as quantization_package

    keep = quantization_package.use_cpu_kernel_layouts
    for model_name in models:
        quantization_package.use_cpu_kernel_layouts = lambda model: 0  # type: ignore[assignment]  # both layouts
        llm = LLM(model_name, quantization="int4", max_model_len=1024)
        quantization_package.use_cpu_kernel_layouts = keep  # type: ignore[assignment]
        layers = [m for m in llm.engine.runner.model.modules() if isinstance(m, Int4Linear)]  # type: ignore[union-attr]
        tiles = {id(m): to_tiles(unpack_codes(m.packed, m.out_features, m.in_features), m.scales_and_zeros)
                 for m in layers}

        def switch(side: str) -> None:
            for m in layers:
                m.tiles, m.tile_scales_zeros, m.tile_exponents = tiles[id(m)] if side == "loom" else (None,) * 3
                m._tile_kernel = cpu_int4_linear()

        prompt = chat_prompt(llm)
        for batch in batches:
            rate = interleaved_decode(llm, prompt, switch, ("pytorch", "loom"), batch, rounds, tokens)
            p, lo = rate["pytorch"], rate["loom"]
            print(f"{model_name} int4 batch {batch}: {p:.1f} tok/s with PyTorch's int4 kernel, {lo:.1f} with Loom's "
                  f"({lo / p:.2f}x; medians of {rounds} interleaved rounds of {tokens} tokens a sequence)", flush=True)
        llm.shutdown()


def main() -> None:
    if cpu_int4_linear() is None:
        raise SystemExit("Loom's int4 kernel is not built here (no C++ compiler, or no AVX-512 VNNI)")
    args = sys.argv[1:]
    torch.set_num_threads(int(args[0]) if args and args[0].isdigit() else 1)
    print(f"threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
    with torch.inference_mode():
        per_matrix()
        if "--decode" in args:
            decode(args[args.index("--decode") + 1:] or ["smollm2-135m-instruct"])


if __name__ == "__main__":
    main()
