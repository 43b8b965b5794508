"""``loom bench decode``: decode step time against context length, Loom and transformers.

Both sides hold ``--batch`` requests of ``ctx`` prompt tokens (random ids,
seeded) and decode greedily with EOS ignored:

* Loom: an ``LLMEngine`` with a KV pool sized to fit the batch; after every
  request has its first token, ``--steps`` steps are timed (each one decode
  token for every request).
* transformers: ``generate`` on the same batch with ``max_new_tokens`` 1 and
  ``1 + steps`` (after a warm-up call of the same shape; best of two each);
  the difference divided by ``steps`` is its decode step (prefill cancels out).

Each context runs in its own spawned process per side, so peak RSS
(``VmHWM``) is that side's own.  Prints ms per step, the ratio, and the
growth from the shortest context (the goal: at most linear in context, and at
most half of transformers' step at 1,024 tokens).
"""

from __future__ import annotations

import random
import time
from typing import Any

import typer

from loom.json_types import JSONObject
from loom.runtime.bench.throughput import in_process


def _prompts(vocab: int, batch: int, ctx: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed + ctx)
    return [[rng.randrange(vocab - 64) for _ in range(ctx)] for _ in range(batch)]


def loom_step(path: str, batch: int, ctx: int, steps: int, threads: int, seed: int) -> JSONObject:
    """ms per Loom decode step at ``batch`` x ``ctx`` tokens."""
    import torch

    from loom.runtime import EngineConfig, LLMEngine, SamplingParams

    torch.set_num_threads(threads)
    block = 16
    blocks = batch * (-(-(ctx + steps + 8) // block)) + 8
    engine = LLMEngine(EngineConfig(model=path, num_kv_blocks=blocks, max_model_len=ctx + steps + 8,
                                    max_num_batched_tokens=max(2048, ctx), enable_prefix_caching=False))
    params = SamplingParams(temperature=0.0, max_tokens=steps + 4, ignore_eos=True)
    for i, prompt in enumerate(_prompts(engine.vocab_size, batch, ctx, seed)):
        engine.add_request(prompt, params, request_id=str(i))
    while any(r.num_output_tokens < 2 for r in engine.requests.values()):
        engine.step()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    return {"ms": (time.perf_counter() - start) / steps * 1000, "backend": engine.runner.attention_backend}


def hf_step(path: str, batch: int, ctx: int, steps: int, threads: int, seed: int) -> JSONObject:
    """ms per transformers decode step (``generate`` of 1 + steps tokens minus 1 token)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    cfg = model.generation_config
    cfg.eos_token_id, cfg.do_sample, cfg.pad_token_id = None, False, 0
    ids = torch.tensor(_prompts(model.config.vocab_size, batch, ctx, seed))
    mask = torch.ones_like(ids)
    times: dict[int, float] = {}
    with torch.inference_mode():
        model.generate(ids, attention_mask=mask, generation_config=cfg, max_new_tokens=2)  # warm-up, same shapes
        for n in (1, 1 + steps, 1, 1 + steps):  # best of two of each
            start = time.perf_counter()
            model.generate(ids, attention_mask=mask, generation_config=cfg, max_new_tokens=n)
            times[n] = min(times.get(n, float("inf")), time.perf_counter() - start)
    return {"ms": (times[1 + steps] - times[1]) / steps * 1000}


def decode(
    model: str = typer.Option(None, help="Any model Loom accepts (a registered name such as smollm2-135m-instruct, a "
                              "folder, a .gguf); default: the cached random-weight ARCH/PRESET checkpoint."),
    arch: str = typer.Option("qwen3", help="Architecture of the default checkpoint."),
    preset: str = typer.Option("small", help="Preset of the default checkpoint."),
    batch: int = typer.Option(16, help="Decoding requests."),
    contexts: str = typer.Option("128,1024,4064", help="Comma-separated context lengths (tokens)."),
    steps: int = typer.Option(16, help="Decode steps timed."),
    threads: int = typer.Option(0, help="torch threads per side (0 = the engine default: physical cores)."),
    skip_hf: bool = typer.Option(False, help="Run Loom only."),
    seed: int = typer.Option(0, help="Prompt seed."),
) -> None:
    """Decode step time (ms) at each context length: Loom, transformers, ratio, peak RSS.

    Example: loom bench decode --contexts 128,1024,4064 --batch 16
    """
    from rich.console import Console
    from rich.table import Table

    from loom.runtime.checkpoint import ensure_checkpoint
    from loom.runtime.threads import default_num_threads

    from loom.runtime.checkpoint.gguf import ensure_float_weights
    from loom.runtime.models.loader import resolve_model_path

    path = str(ensure_float_weights(resolve_model_path(model))) if model else str(ensure_checkpoint(arch, preset))
    threads = threads or default_num_threads()
    table = Table(title=f"loom bench decode — {path}, batch {batch}, {threads} threads, ms per decode step")
    for col in ("context", "Loom ms", "Loom growth", "HF ms", "HF growth", "Loom / HF", "Loom RSS MiB",
                "HF RSS MiB", "attention"):
        table.add_column(col, justify="right")
    first: dict[str, float] = {}
    for ctx in (int(c) for c in contexts.split(",")):
        loom = in_process(loom_step, path, batch, ctx, steps, threads, seed)
        hf = None if skip_hf else in_process(hf_step, path, batch, ctx, steps, threads, seed)
        first.setdefault("loom", loom["ms"])
        if hf:
            first.setdefault("hf", hf["ms"])
        table.add_row(
            str(ctx), f"{loom['ms']:.1f}", f"{loom['ms'] / first['loom']:.2f}x",
            f"{hf['ms']:.1f}" if hf else "-", f"{hf['ms'] / first['hf']:.2f}x" if hf else "-",
            f"{loom['ms'] / hf['ms']:.2f}" if hf else "-", f"{loom['peak_rss_mib']:.0f}",
            f"{hf['peak_rss_mib']:.0f}" if hf else "-", loom["backend"],
        )
        Console().print(f"context {ctx}: Loom {loom['ms']:.1f} ms" + (f", HF {hf['ms']:.1f} ms" if hf else ""))
    Console(width=200).print(table)
