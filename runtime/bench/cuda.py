"""``loom bench cuda``: int8 / int4 weight-only against bfloat16 on a GPU, kernels and engine, in one run.

Two parts, both on the model's own shapes (a registered name, a folder, or a folder's config with
``--load-format dummy``: random weights, the same bytes and arithmetic):

* **kernels** (``--kernels``): every projection of one decoder layer and the LM head, at 1 and 64 rows,
  bfloat16 activations: cuBLAS on the bfloat16 weight, Loom's int8 layer (its Triton kernel under 64
  rows, the bfloat16 GEMM of the dequantized weight from 64), PyTorch's own CUDA
  ``_weight_int8pack_mm``, and the int4 layer (PyTorch's tinygemm).  Microseconds per call (CUDA events,
  median of ``--reps``) and the weight bytes read per microsecond (GB/s).
* **engine**: one ``LLM`` per side (bfloat16 weights, int8, int4; activations and KV cache bfloat16),
  all loaded first, then ``--rounds`` interleaved rounds of: batch-1 decode tok/s (``--decode-tokens``
  greedy tokens after a 32-token prompt), TTFT of a ``--prompt-len`` prompt, and aggregate decode
  tok/s of each ``--batches`` size.  Medians, and each side's ratio to bfloat16.

The engine is eager (no CUDA graphs, no fused kernels of its own on GPU): at batch 1 a step's few
hundred kernel launches, not its weight bytes, bound it, which these figures show.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import typer

from loom.json_types import JSONObject
from loom.runtime.bench.cpu import measure_llm

SIDES = ("bf16", "int8", "int4")


def layer_shapes(hf_config: Any) -> list[tuple[str, int, int]]:
    """``(name, N, K)`` of one decoder layer's projections (q/k/v and gate/up fused, as Loom runs them) and
    the LM head."""
    hidden, inter = hf_config.hidden_size, hf_config.intermediate_size
    heads, kv = hf_config.num_attention_heads, hf_config.num_key_value_heads
    head_dim = getattr(hf_config, "head_dim", None) or hidden // heads
    return [("qkv_proj", (heads + 2 * kv) * head_dim, hidden), ("o_proj", hidden, heads * head_dim),
            ("gate_up_proj", 2 * inter, hidden), ("down_proj", hidden, inter), ("lm_head", hf_config.vocab_size, hidden)]


def _time_us(fn: Any, reps: int) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def kernel_rows(hf_config: Any, rows: tuple[int, ...], reps: int) -> list[JSONObject]:
    """One entry per (projection, rows, kernel): ``us`` per call and ``gbs`` (weight bytes / time)."""
    import torch

    from loom.runtime.quantization import Int4Linear, Int8Linear
    from loom.runtime.quantization import use_cuda_layouts

    device = torch.device("cuda")
    out: list[JSONObject] = []
    for name, n, k in layer_shapes(hf_config):
        w = torch.randn(n, k) * 0.02
        int8 = Int8Linear.from_float(w, None).to(device)
        int4 = Int4Linear.from_float(w, None, 32) if name != "lm_head" else None
        if int4 is not None:
            use_cuda_layouts(torch.nn.Sequential(int4), device)
        wb = w.to(device, torch.bfloat16)
        kernels: dict[str, tuple[Any, int]] = {
            "bf16 cuBLAS": (lambda x: torch.nn.functional.linear(x, wb), 2 * n * k),
            "int8 Loom": (lambda x: int8(x), n * k),
            "int8 aten._weight_int8pack_mm": (
                lambda x: torch.ops.aten._weight_int8pack_mm(x, int8.qweight, int8.scales), n * k),
        }
        if int4 is not None:
            kernels["int4 tinygemm"] = (lambda x: int4(x), n * k // 2 + 4 * n * k // 32)
        for m in rows:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            for label, (fn, nbytes) in kernels.items():
                try:
                    us = _time_us(lambda: fn(x), reps)
                except (RuntimeError, NotImplementedError) as exc:  # e.g. an op without a CUDA kernel
                    out.append({"layer": name, "n": n, "k": k, "rows": m, "kernel": label, "error": str(exc)[:80]})
                    continue
                out.append({"layer": name, "n": n, "k": k, "rows": m, "kernel": label, "us": us,
                            "gbs": nbytes / us / 1000})
        del int8, int4, wb
        torch.cuda.empty_cache()
    return out


def cuda(
    model: str = typer.Option("qwen2.5-coder-1.5b-instruct", help="Registered name or folder."),
    load_format: str = typer.Option("auto", help="'dummy': random weights of the folder's config."),
    sides: str = typer.Option(",".join(SIDES), help="Comma-separated: bf16, int8, int4."),
    rounds: int = typer.Option(3, help="Interleaved rounds; medians are shown (at least 3)."),
    prompt_len: int = typer.Option(1000, help="Prompt tokens of the TTFT measurement."),
    decode_tokens: int = typer.Option(128, help="Tokens generated per request."),
    batches: str = typer.Option("64", help="Comma-separated batch sizes of the aggregate figure."),
    kernels: bool = typer.Option(True, help="Time the projections' kernels too."),
    reps: int = typer.Option(50, help="Timed calls per kernel (median)."),
    seed: int = typer.Option(0, help="Prompt seed."),
) -> None:
    """Weight-only int8 / int4 against bfloat16 on a CUDA GPU: per-projection kernel times, then engine decode
    tok/s at batch 1 and the ``--batches`` sizes and TTFT, interleaved.

    Example: loom bench cuda --model qwen2.5-coder-1.5b-instruct
    """
    import torch
    from rich.console import Console
    from rich.table import Table

    from loom.runtime import LLM
    from loom.runtime.models.loader import load_hf_config, resolve_model_path
    from loom.runtime.model_runner import ModelRunner
    from loom.runtime.quantization import quantized_bytes

    if not torch.cuda.is_available():
        raise typer.BadParameter("no CUDA device", param_hint="--model")
    if rounds < 3:
        raise typer.BadParameter("at least 3 rounds (medians)", param_hint="--rounds")
    console = Console(width=200)
    props = torch.cuda.get_device_properties(0)
    console.print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}")
    hf_config = load_hf_config(resolve_model_path(model))
    if kernels:
        table = Table(title=f"kernels on {model}'s shapes: us per call (weight GB/s)")
        for col in ("layer", "N x K", "rows", "kernel", "us", "GB/s"):
            table.add_column(col, justify="right")
        for row in kernel_rows(hf_config, (1, 64), reps):
            table.add_row(str(row["layer"]), f"{row['n']} x {row['k']}", str(row["rows"]), str(row["kernel"]),
                          f"{row['us']:.1f}" if "us" in row else str(row["error"]),
                          f"{row['gbs']:.0f}" if "gbs" in row else "-")
        console.print(table)
    batch_list = [int(b) for b in batches.split(",") if b]
    llms: dict[str, Any] = {}
    for side in sides.split(","):
        start = time.perf_counter()
        llms[side] = LLM(model, device="cuda", dtype="bfloat16", load_format=load_format,
                         quantization=None if side == "bf16" else side,
                         max_model_len=max(2048, prompt_len + decode_tokens + 64),
                         max_num_seqs=max(batch_list + [1]), enable_prefix_caching=False)
        runner = llms[side].engine.runner
        weights = quantized_bytes(runner.model) if isinstance(runner, ModelRunner) else 0
        console.print(f"[dim]{side}: loaded in {time.perf_counter() - start:.1f} s, weights {weights / 2**20:.0f} MiB[/dim]")
    runs: dict[str, list[JSONObject]] = {}
    for r in range(rounds):
        for side, llm in llms.items():
            res = measure_llm(llm, prompt_len, decode_tokens, batch_list, seed)
            runs.setdefault(side, []).append(res)
            console.print(f"[dim]round {r + 1}: {side}: {res['decode']:.1f} tok/s at batch 1, "
                          f"TTFT {res['ttft_ms']:.1f} ms[/dim]")
    table = Table(title=f"loom bench cuda — {model} ({load_format}), medians of {rounds} interleaved rounds")
    for col in ("side", "batch-1 tok/s", "vs bf16", "TTFT ms", *(f"batch {b} tok/s" for b in batch_list),
                *(f"vs bf16 @{b}" for b in batch_list)):
        table.add_column(col, justify="right")

    def median(side: str, key: str) -> float:
        return statistics.median(float(x[key]) for x in runs[side])

    def median_at(side: str, b: int) -> float:
        return statistics.median(float(x["aggregate"][str(b)]) for x in runs[side])

    base = "bf16" if "bf16" in runs else None
    for side in runs:
        decode = median(side, "decode")
        agg = [median_at(side, b) for b in batch_list]
        table.add_row(side, f"{decode:.1f}", f"{decode / median(base, 'decode'):.2f}x" if base else "-",
                      f"{median(side, 'ttft_ms'):.1f}", *(f"{a:.0f}" for a in agg),
                      *((f"{a / median_at(base, b):.2f}x" if base else "-") for a, b in zip(agg, batch_list)))
    console.print(table)
    if "bf16" in runs and load_format != "dummy":  # random weights' logits are too flat to compare tokens
        ref = runs["bf16"][0]["tokens"]
        for side in runs:
            got = runs[side][0]["tokens"]
            same = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), len(ref))
            console.print(f"{side}: greedy tokens equal to bf16's for the first {same} of {len(ref)}")


if __name__ == "__main__":
    typer.run(cuda)
