"""Loom's int8 decode kernel against PyTorch's ``_weight_int8pack_mm``, per matrix and in the engine.

``python -m benchmarks.int8_linear [THREADS] [--decode]`` (default 1 thread):

* per matrix: SmolLM2-135M's shapes (LM head ``[49152, 576]``, ``gate_up``, ``down``, ``qkv``) at 1 to 8
  rows, both kernels timed one after the other per case, median ms of 30 calls, the ratio and each
  one's largest difference from the float32 product of the dequantized weight;
* ``--decode``: greedy decode of the default model (``int8`` and ``int4``, whose LM head is int8) at
  batch 1 and 8, 64 tokens a sequence after a short chat prompt, three interleaved rounds with Loom's
  kernel on and off; median tokens/s and the ratio.
"""

from __future__ import annotations

import sys

import torch

from benchmarks.decode_ab import median_ms
from loom.runtime.quantization import int8 as int8_module
from loom.runtime.quantization.int8 import ACT_DTYPE, Int8Linear

SHAPES = {"lm_head": (49152, 576), "gate_up": (3072, 576), "down": (576, 1536), "qkv": (960, 576)}


def per_matrix() -> None:
    kernel = int8_module._decode_kernel()
    if kernel is None:
        raise SystemExit("Loom's CPU kernels are not built here (no C++ compiler?)")
    print(f"{'matrix':<8} {'rows':>4} {'pytorch ms':>10} {'loom ms':>8} {'ratio':>6} {'err pytorch':>11} {'err loom':>9}")
    for name, (n, k) in SHAPES.items():
        layer = Int8Linear.from_float(torch.randn(n, k) * 0.05, None)
        weight = layer.qweight.float() * layer.scales.float()[:, None]
        for rows in (1, 2, 4, 8):
            x = torch.randn(rows, k)
            ref = x @ weight.T

            def aten() -> torch.Tensor:
                return torch.ops.aten._weight_int8pack_mm(x.to(ACT_DTYPE), layer.qweight, layer.scales).float()

            t_aten, t_loom = median_ms(aten), median_ms(lambda: kernel(x, layer.qweight, layer.scales))
            err = (kernel(x, layer.qweight, layer.scales) - ref).abs().max().item()
            print(f"{name:<8} {rows:>4} {t_aten:>10.3f} {t_loom:>8.3f} {t_aten / t_loom:>6.2f} "
                  f"{(aten() - ref).abs().max().item():>11.2e} {err:>9.2e}")


def decode(rounds: int = 3, tokens: int = 64, batches: tuple[int, ...] = (1, 8)) -> None:
    from benchmarks.decode_ab import chat_prompt, interleaved_decode
    from loom.runtime import LLM

    kernel = int8_module._decode_kernel

    def switch(side: str) -> None:
        int8_module._decode_kernel = kernel if side == "loom" else (lambda: None)  # type: ignore[assignment]

    for method in ("int8", "int4"):
        llm = LLM("smollm2-135m-instruct", quantization=method, max_model_len=1024)
        prompt = chat_prompt(llm)
        for batch in batches:
            rate = interleaved_decode(llm, prompt, switch, ("pytorch", "loom"), batch, rounds, tokens)
            int8_module._decode_kernel = kernel
            p, lo = rate["pytorch"], rate["loom"]
            print(f"{method} batch {batch}: {p:.1f} tok/s with PyTorch's int8 kernel, {lo:.1f} with Loom's "
                  f"({lo / p:.2f}x; medians of {rounds} interleaved rounds of {tokens} tokens a sequence)")
        llm.shutdown()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    torch.set_num_threads(int(args[0]) if args else 1)
    print(f"threads {torch.get_num_threads()}")
    with torch.inference_mode():
        per_matrix()
    if "--decode" in sys.argv:
        decode()


if __name__ == "__main__":
    main()
