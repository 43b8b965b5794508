"""``loom bench cpu``: Loom float32 / int8 / int4 against transformers and llama.cpp on a CPU.

For each model and each side, in its own spawned process (so peak RSS is that
side's own), with ``--threads`` threads:

- **decode tok/s at batch 1**: ``--decode-tokens`` greedy tokens after a
  32-token prompt, timed from the first token to the last (prefill excluded);
- **TTFT** of a ``--prompt-len``-token prompt (ms, one request, cold cache);
- **aggregate tok/s at batch 8 and 32** (``--batches``): that many requests of
  ``--decode-tokens`` tokens each submitted at once, total generated tokens
  over wall time (llama.cpp's Python binding serves one sequence at a time, so
  its figure is sequential, as a user of it would get);
- **peak RSS** (MiB) of the process.

Rounds (``--rounds``, at least 3) interleave the sides; the table shows
medians and, beside each batch-1 figure, the bandwidth ceiling: bytes of
weights read per token over the machine's memory bandwidth (a 256 MiB copy,
measured once), the speed no weight-bound decoder can pass.

Prompts are random token ids (seeded) with EOS ignored, the same ids on every
side.  llama.cpp runs when ``--llama-cpp-python`` names a Python that can
import ``llama_cpp`` (a separate benchmark environment: ``make bench-env``);
its GGUFs are the model's own 4-bit file and a Q8_0 written by llama.cpp's
``convert_hf_to_gguf.py`` (``--llama-cpp-src``) from the converted folder.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from loom.json_types import JSONObject
from loom.runtime.bench.throughput import in_process

LOOM_SIDES = ("none", "int8", "int4")


def gguf_type(file_name: str) -> str:
    """The quantization type a GGUF's file name ends in, as llama.cpp spells it: ``Q4_1`` for
    ``SmolLM2-135M-Instruct.Q4_1.gguf``, ``Q4_K_M`` for ``qwen2.5-coder-0.5b-instruct-q4_k_m.gguf``;
    the name without ``.gguf`` when it ends in none."""
    stem = file_name.removesuffix(".gguf")
    match = re.search(r"[._-]((?:[qQ]\d|[iI][qQ]\d|[fF]16|[bB][fF]16|[fF]32)[A-Za-z0-9_]*)$", stem)
    return match.group(1).upper() if match else stem

def _ids(vocab: int, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, vocab - 100) for _ in range(n)]


def loom_side(model: str, quantization: str, threads: int, prompt_len: int, decode_tokens: int,
              batches: list[int], seed: int) -> JSONObject:
    """Loom's figures for one quantization (``"none"`` = float32)."""
    import torch

    from loom.runtime import LLM
    from loom.runtime.model_runner import ModelRunner
    from loom.runtime.quantization import quantized_bytes

    torch.set_num_threads(threads)
    llm = LLM(model, quantization=quantization, max_model_len=max(2048, prompt_len + decode_tokens + 64),
              max_num_seqs=max(batches + [1]), enable_prefix_caching=False)
    figures = measure_llm(llm, prompt_len, decode_tokens, batches, seed)
    runner = llm.engine.runner
    weights = quantized_bytes(runner.model) if isinstance(runner, ModelRunner) else 0
    return {**figures, "weight_bytes": weights}


def measure_llm(llm: Any, prompt_len: int, decode_tokens: int, batches: list[int], seed: int) -> JSONObject:
    """One ``LLM``'s figures, after one warm-up request: ``decode`` (tok/s of one greedy request of
    ``decode_tokens`` after a 32-token prompt), ``ttft_ms`` of a ``prompt_len`` prompt, ``aggregate`` tok/s per
    batch size (``batches`` requests at once), and ``tokens`` (the batch-1 request's output ids)."""
    from loom.runtime import SamplingParams

    vocab = llm.engine.vocab_size
    params = SamplingParams(max_tokens=decode_tokens, temperature=0.0, ignore_eos=True)
    llm.generate(prompt_token_ids=[_ids(vocab, 32, seed - 1)], sampling_params=params, use_tqdm=False)  # warm-up
    out = llm.generate(prompt_token_ids=[_ids(vocab, 32, seed)], sampling_params=params, use_tqdm=False)[0]
    times = out.token_times
    decode = (len(times) - 1) / (times[-1] - times[0])
    long = llm.generate(prompt_token_ids=[_ids(vocab, prompt_len, seed + 1)], use_tqdm=False,
                        sampling_params=SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))[0]
    assert long.first_token_time is not None  # a finished request has its first token
    ttft = (long.first_token_time - long.arrival_time) * 1000
    aggregate = {}
    for b in batches:
        start = time.perf_counter()
        outs = llm.generate(prompt_token_ids=[_ids(vocab, 32, seed + 10 + i) for i in range(b)],
                            sampling_params=params, use_tqdm=False)
        aggregate[str(b)] = sum(len(o.token_ids) for o in outs) / (time.perf_counter() - start)
    return {"decode": decode, "ttft_ms": ttft, "aggregate": aggregate, "tokens": out.token_ids}


def hf_side(model: str, threads: int, prompt_len: int, decode_tokens: int, batches: list[int],
            seed: int) -> JSONObject:
    """transformers' figures (float32 ``generate``; batches of equal-length prompts, so no padding)."""
    import torch
    from transformers import AutoModelForCausalLM

    from loom.runtime.checkpoint.gguf import ensure_float_weights
    from loom.runtime.models.loader import resolve_model_path

    torch.set_num_threads(threads)
    path = ensure_float_weights(resolve_model_path(model))  # transformers reads float32 safetensors
    m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    cfg = m.generation_config
    cfg.eos_token_id, cfg.do_sample, cfg.pad_token_id = None, False, 0
    vocab = m.config.vocab_size

    def run(prompts: list[list[int]], n: int) -> float:
        ids = torch.tensor(prompts)
        start = time.perf_counter()
        with torch.inference_mode():
            m.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg, max_new_tokens=n,
                       min_new_tokens=n)
        return time.perf_counter() - start

    run([_ids(vocab, 32, seed - 1)], 4)  # warm-up
    one = run([_ids(vocab, 32, seed)], 1)
    full = run([_ids(vocab, 32, seed)], decode_tokens)
    ttft = run([_ids(vocab, prompt_len, seed + 1)], 1) * 1000
    aggregate = {str(b): b * decode_tokens / run([_ids(vocab, 32, seed + 10 + i) for i in range(b)], decode_tokens)
                 for b in batches}
    weights = sum(p.numel() * p.element_size() for p in m.parameters())
    return {"decode": (decode_tokens - 1) / (full - one), "ttft_ms": ttft, "aggregate": aggregate,
            "weight_bytes": weights}


_LLAMA_CPP = r"""
import json, random, sys, time
from llama_cpp import Llama
a = json.loads(sys.argv[1])
def ids(vocab, n, seed):
    rng = random.Random(seed)
    return [rng.randrange(100, vocab - 100) for _ in range(n)]
llm = Llama(model_path=a["gguf"], n_threads=a["threads"], n_threads_batch=a["threads"], n_batch=512,
            n_ctx=max(2048, a["prompt_len"] + a["decode_tokens"] + 64), verbose=False)
vocab = llm.n_vocab()
def gen(prompt, n):
    llm.reset()
    times = []
    start = time.perf_counter()
    for i, _tok in enumerate(llm.generate(prompt, top_k=1, temp=0.0, reset=True)):
        times.append(time.perf_counter())
        if len(times) == n:
            break
    return start, times
gen(ids(vocab, 32, a["seed"] - 1), 4)
_, t = gen(ids(vocab, 32, a["seed"]), a["decode_tokens"])
decode = (len(t) - 1) / (t[-1] - t[0])
s, t = gen(ids(vocab, a["prompt_len"], a["seed"] + 1), 1)
ttft = (t[0] - s) * 1000
agg = {}
for b in a["batches"]:
    start = time.perf_counter()
    total = sum(len(gen(ids(vocab, 32, a["seed"] + 10 + i), a["decode_tokens"])[1]) for i in range(b))
    agg[str(b)] = total / (time.perf_counter() - start)
rss = next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
import os
print(json.dumps({"decode": decode, "ttft_ms": ttft, "aggregate": agg, "peak_rss_mib": rss,
                  "weight_bytes": os.path.getsize(a["gguf"])}))
"""


def llama_cpp_side(python: str, gguf: str, threads: int, prompt_len: int, decode_tokens: int,
                   batches: list[int], seed: int) -> JSONObject:
    """llama.cpp's figures, run by ``python`` (an environment with ``llama_cpp``)."""
    args = {"gguf": gguf, "threads": threads, "prompt_len": prompt_len, "decode_tokens": decode_tokens,
            "batches": batches, "seed": seed}
    proc = subprocess.run([python, "-c", _LLAMA_CPP, json.dumps(args)], capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        raise RuntimeError(f"llama.cpp side failed: {proc.stderr.strip().splitlines()[-1:]}")
    result: JSONObject = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def memory_bandwidth_gbs() -> float:
    """Measured copy bandwidth (GB/s: bytes read + written per second), best of 5 copies of 256 MiB."""
    import torch

    src = torch.ones(1 << 26, dtype=torch.float32)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * 4 / best / 1e9


def q8_gguf(model_dir: Path, src: Path, python: str, out_dir: Path) -> Path:
    """A Q8_0 GGUF of the HF folder ``model_dir``, written once by llama.cpp's converter in ``src``."""
    out = out_dir / f"{model_dir.name}.Q8_0.gguf"
    if not out.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, str(src / "convert_hf_to_gguf.py"), str(model_dir), "--outtype", "q8_0",
                        "--outfile", str(out)], check=True, capture_output=True)
    return out


def cpu(
    models: str = typer.Option("smollm2-135m-instruct", help="Comma-separated registered names (or folders)."),
    rounds: int = typer.Option(3, help="Interleaved rounds; medians are shown (at least 3)."),
    threads: int = typer.Option(2, help="Threads per side (torch and llama.cpp alike)."),
    prompt_len: int = typer.Option(1000, help="Prompt tokens of the TTFT measurement."),
    decode_tokens: int = typer.Option(128, help="Tokens generated per request."),
    batches: str = typer.Option("8,32", help="Comma-separated batch sizes of the aggregate figure."),
    sides: str = typer.Option("none,int8,int4,hf,llama.cpp", help="Which sides run: Loom quantizations "
                              "(none = float32), hf, llama.cpp."),
    llama_cpp_python: str = typer.Option("", help="Python of an environment with llama_cpp (make bench-env)."),
    llama_cpp_src: str = typer.Option("", help="llama.cpp source folder holding convert_hf_to_gguf.py."),
    seed: int = typer.Option(0, help="Prompt seed."),
) -> None:
    """Decode tok/s, TTFT, batched tok/s and peak RSS: Loom float32/int8/int4, transformers, llama.cpp.

    Example: loom bench cpu --models smollm2-135m-instruct --llama-cpp-python .venv-bench/bin/python
    """
    from rich.console import Console
    from rich.table import Table

    from loom.runtime.checkpoint.cache import loom_cache_root
    from loom.runtime.checkpoint.registry import gguf_path, lookup
    from loom.runtime.checkpoint.gguf import ensure_float_weights
    from loom.runtime.models.loader import resolve_model_path

    if rounds < 3:
        raise typer.BadParameter("at least 3 rounds (medians)", param_hint="--rounds")
    batch_list = [int(b) for b in batches.split(",") if b]
    wanted = [s for s in sides.split(",") if s]
    console = Console(width=200)
    bandwidth = memory_bandwidth_gbs()
    console.print(f"memory bandwidth (copy): {bandwidth:.1f} GB/s; {threads} threads per side")
    for name in models.split(","):
        folder = ensure_float_weights(resolve_model_path(name))  # llama.cpp's converter and transformers read them
        runs: dict[str, list[Any]] = {}
        plan: list[tuple[str, Any, tuple[Any, ...]]] = []
        common = (threads, prompt_len, decode_tokens, batch_list, seed)
        for side in wanted:
            if side in LOOM_SIDES:
                plan.append((f"Loom {'float32' if side == 'none' else side}", loom_side, (name, side, *common)))
            elif side == "hf":
                plan.append(("transformers float32", hf_side, (name, *common)))
            elif side == "llama.cpp" and llama_cpp_python:
                spec = lookup(name)
                if spec is not None and not gguf_path(spec).is_file():
                    console.print(f"[dim]{name}: its GGUF is not kept (pulled by an older Loom): "
                                  f"loom model rm {name} && loom model pull {name}[/dim]")
                elif spec is not None:
                    plan.append((f"llama.cpp {gguf_type(spec.gguf_name)}", None,
                                 (llama_cpp_python, str(gguf_path(spec)), *common)))
                if llama_cpp_src:
                    q8 = q8_gguf(folder, Path(llama_cpp_src), llama_cpp_python, loom_cache_root() / "bench-gguf")
                    plan.append(("llama.cpp Q8_0", None, (llama_cpp_python, str(q8), *common)))
        for r in range(rounds):
            for label, fn, args in plan:
                result = in_process(fn, *args) if fn is not None else llama_cpp_side(*args)
                runs.setdefault(label, []).append(result)
                console.print(f"[dim]{name} round {r + 1}: {label}: {result['decode']:.1f} tok/s at batch 1, "
                              f"TTFT {result['ttft_ms']:.0f} ms[/dim]")
        table = Table(title=f"loom bench cpu — {name}, medians of {rounds} interleaved rounds, {threads} threads")
        for col in ("side", "batch-1 tok/s", "ceiling tok/s", f"TTFT {prompt_len} ms",
                    *(f"batch {b} tok/s" for b in batch_list), "peak RSS MiB", "weights MiB"):
            table.add_column(col, justify="right")
        for label, results in runs.items():
            med = {k: statistics.median(r[k] for r in results) for k in ("decode", "ttft_ms", "peak_rss_mib")}
            weights = results[0]["weight_bytes"]
            table.add_row(label, f"{med['decode']:.1f}", f"{bandwidth * 1e9 / weights:.0f}" if weights else "-",
                          f"{med['ttft_ms']:.0f}",
                          *(f"{statistics.median(r['aggregate'][str(b)] for r in results):.1f}" for b in batch_list),
                          f"{med['peak_rss_mib']:.0f}", f"{weights / 2**20:.0f}")
        console.print(table)
