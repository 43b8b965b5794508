"""``loom bench throughput``: Loom against Hugging Face ``generate`` on the same model and prompts.

Workloads (random token ids, seeded):

* ``a`` — N requests, prompts of 32–512 tokens and outputs of 16–256 tokens
  (uniform).  Loom gets every request at once (continuous batching); HF runs
  them in order in left-padded batches of ``--hf-batch-size``, each batch
  generating as many tokens as its longest request needs.
* ``b`` — cold start with a shared prefix: N requests (default 32) submitted
  together, sharing a 512-token prefix that nothing warmed, each with a
  distinct 32-token suffix and ``--output-len-b`` (32) output tokens.
* ``c`` — long context: N requests (default 32) with prompts of 1,000-2,000
  tokens and 64 output tokens (decode over long contexts dominates).

Loom's KV pool is sized to hold every request at once (HF's cache does too),
so neither side preempts.

Both sides decode greedily with EOS ignored, so each request yields exactly its
output length.  Throughput = requested output tokens / wall time (vLLM's
definition), prefill included; tokens per CPU-second are printed too, since
on a shared machine the wall-clock share each side gets varies.  Each side runs in its own spawned process, one
after the other, so its peak RSS (``VmHWM``) is its own.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import random
import resource
import time
from dataclasses import dataclass
from typing import Any

import typer

from loom.json_types import JSONObject

logger = logging.getLogger(__name__)


@dataclass
class Workload:
    """Prompts (token ids) and output lengths (tokens) of one benchmark workload."""

    name: str
    prompts: list[list[int]]
    output_lens: list[int]


def make_workload(name: str, num_requests: int, vocab_size: int, seed: int, output_len_b: int = 32) -> Workload:
    """Build workload ``a``, ``b`` or ``c`` (see module docstring); ids avoid the last 64 (special) ids."""
    rng = random.Random(seed)
    top = vocab_size - 64

    def ids(n: int) -> list[int]:
        return [rng.randrange(top) for _ in range(n)]

    if name == "a":
        prompts = [ids(rng.randint(32, 512)) for _ in range(num_requests)]
        return Workload("a", prompts, [rng.randint(16, 256) for _ in range(num_requests)])
    if name == "b":
        prefix = ids(512)
        return Workload("b", [prefix + ids(32) for _ in range(num_requests)], [output_len_b] * num_requests)
    if name == "c":
        return Workload("c", [ids(rng.randint(1000, 2000)) for _ in range(num_requests)], [64] * num_requests)
    raise ValueError(f"workload: must be 'a', 'b' or 'c', got {name!r}")


DEFAULT_REQUESTS = {"a": 64, "b": 32, "c": 32}


def run_loom(model: str, wl: Workload, threads: int, engine_args: JSONObject) -> JSONObject:
    """Run ``wl`` through ``runtime.LLM``; returns seconds, tokens and counters."""
    import torch

    from loom.runtime import LLM, SamplingParams

    torch.set_num_threads(threads)
    tokens = sum(len(p) + n for p, n in zip(wl.prompts, wl.output_lens))
    engine_args = {"num_kv_blocks": tokens // 16 + 2 * len(wl.prompts) + 16, **engine_args}
    llm = LLM(model, **engine_args)
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in wl.output_lens]
    llm.generate(prompt_token_ids=[[1, 2, 3]], sampling_params=SamplingParams(max_tokens=2), use_tqdm=False)
    start, cpu = time.perf_counter(), time.process_time()
    outs = llm.generate(prompt_token_ids=wl.prompts, sampling_params=params, use_tqdm=False)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert [len(o.token_ids) for o in outs] == wl.output_lens
    stats = llm.stats()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "output_tokens": sum(len(o.token_ids) for o in outs),
        "cached_tokens": sum(o.num_cached_tokens for o in outs),
        "preemptions": stats["num_preemptions"],
        "steps": stats["num_steps"],
        "kv_blocks": stats["kv_blocks_total"],
    }


def run_hf(model: str, wl: Workload, threads: int, batch_size: int) -> JSONObject:
    """Run ``wl`` through transformers ``generate`` in left-padded batches."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    cfg = hf.generation_config
    cfg.eos_token_id, cfg.do_sample, cfg.pad_token_id = None, False, 0
    generated = 0
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(wl.prompts), batch_size):
        prompts, lens = wl.prompts[i:i + batch_size], wl.output_lens[i:i + batch_size]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=mask, generation_config=cfg, max_new_tokens=max(lens))
        generated += (out.shape[1] - width) * len(prompts)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "output_tokens": sum(wl.output_lens),
        "generated_incl_padding": generated,
    }


def peak_rss_mib() -> float:
    """This process's peak resident set (MiB): ``VmHWM`` of ``/proc/self/status``.

    Not ``ru_maxrss``: Linux carries that over ``exec`` from the pre-exec image, a fork of
    the parent, so a spawned child would report at least its parent's peak.  Falls back to
    ``ru_maxrss`` where ``/proc`` is missing.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(fn: Any, args: tuple, conn: Any) -> None:
    logging.basicConfig(level=logging.WARNING)
    try:
        result = fn(*args)
        result["peak_rss_mib"] = peak_rss_mib()
        conn.send(result)
    except BaseException as exc:  # noqa: BLE001 - report any failure to the parent
        conn.send({"error": repr(exc)})
    finally:
        conn.close()


def in_process(fn: Any, *args: Any) -> JSONObject:
    """``fn(*args)`` (a module-level function returning a dict) in a fresh spawned process.

    The dict comes back with ``peak_rss_mib`` (that process's own peak, :func:`peak_rss_mib`).
    Raises ``RuntimeError`` naming ``fn`` when it failed, or when its process died without an answer.
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, args, child))
    proc.start()
    while not parent.poll(0.5):
        if not proc.is_alive() and not parent.poll(0):  # crashed (a signal) before sending anything
            raise RuntimeError(f"{fn.__name__} failed: its process died with exit code {proc.exitcode}")
    result = parent.recv()
    proc.join()
    if "error" in result:
        raise RuntimeError(f"{fn.__name__} failed: {result['error']}")
    return result


def throughput(
    model: str = typer.Option(None, help="Any model Loom accepts (a registered name such as smollm2-135m-instruct, a "
                              "folder, a .gguf); default: the cached random-weight ARCH/PRESET checkpoint."),
    arch: str = typer.Option("qwen3", help="Architecture of the default checkpoint."),
    preset: str = typer.Option("small", help="Preset of the default checkpoint (tiny | small)."),
    workload: str = typer.Option("abc", help="Any of a, b, c (e.g. abc)."),
    num_requests: int = typer.Option(None, help="Requests per workload (default a: 64, b: 32, c: 32)."),
    hf_batch_size: int = typer.Option(16, help="HF generate batch size (left padding)."),
    output_len_b: int = typer.Option(32, help="Output tokens per request in workload b."),
    threads: int = typer.Option(0, help="torch threads per side (0 = physical cores available)."),
    max_num_batched_tokens: int = typer.Option(2048, help="Loom per-step token budget."),
    skip_hf: bool = typer.Option(False, help="Run Loom only."),
    seed: int = typer.Option(0, help="Workload seed."),
) -> None:
    """Tokens/s of Loom and HF transformers on the same model and prompts, and their ratio.

    Example: loom bench throughput --workload a --num-requests 16
    """

    from rich.console import Console
    from rich.table import Table
    from transformers import AutoConfig

    from loom.runtime.checkpoint import ensure_checkpoint
    from loom.runtime.threads import default_num_threads

    from loom.runtime.checkpoint.gguf import ensure_float_weights
    from loom.runtime.models.loader import resolve_model_path

    path = str(ensure_float_weights(resolve_model_path(model))) if model else str(ensure_checkpoint(arch, preset))
    vocab = AutoConfig.from_pretrained(path).vocab_size
    threads = threads or default_num_threads()
    engine_args = {"max_num_batched_tokens": max_num_batched_tokens}
    console = Console(width=200)
    table = Table(title=f"loom bench throughput — {path} ({threads} threads)")
    cols = ("workload", "system", "requests", "output tok", "seconds", "tok/s", "Loom/HF", "CPU s", "tok/CPU-s",
            "Loom/HF (CPU)", "peak RSS MiB", "notes")
    for col in cols:
        table.add_column(col)
    for name in workload:
        wl = make_workload(name, num_requests or DEFAULT_REQUESTS[name], vocab, seed, output_len_b)
        loom = in_process(run_loom, path, wl, threads, engine_args)
        loom_tps = loom["output_tokens"] / loom["seconds"]
        note = f"cached {loom['cached_tokens']} tok, {loom['preemptions']} preemptions, {loom['steps']} steps"
        console.print(f"workload {name}: Loom {loom_tps:.1f} tok/s ({loom['seconds']:.1f} s, {loom['cpu_seconds']:.1f} CPU s; {note})")
        row_hf = None
        if not skip_hf:
            hf = in_process(run_hf, path, wl, threads, hf_batch_size)
            hf_tps = hf["output_tokens"] / hf["seconds"]
            console.print(f"workload {name}: HF {hf_tps:.1f} tok/s ({hf['seconds']:.1f} s, {hf['cpu_seconds']:.1f} CPU s)")
            row_hf = (hf, hf_tps)
        loom_cpu = loom["output_tokens"] / loom["cpu_seconds"]
        ratio = f"{loom_tps / row_hf[1]:.2f}x" if row_hf else "-"
        ratio_cpu = f"{loom_cpu / (row_hf[0]['output_tokens'] / row_hf[0]['cpu_seconds']):.2f}x" if row_hf else "-"
        table.add_row(name, "Loom", str(len(wl.prompts)), str(loom["output_tokens"]), f"{loom['seconds']:.1f}",
                      f"{loom_tps:.1f}", ratio, f"{loom['cpu_seconds']:.1f}", f"{loom_cpu:.1f}", ratio_cpu,
                      f"{loom['peak_rss_mib']:.0f}", note)
        if row_hf:
            hf, hf_tps = row_hf
            table.add_row(name, f"HF generate (batch {hf_batch_size})", str(len(wl.prompts)), str(hf["output_tokens"]),
                          f"{hf['seconds']:.1f}", f"{hf_tps:.1f}", "1.00x", f"{hf['cpu_seconds']:.1f}",
                          f"{hf['output_tokens'] / hf['cpu_seconds']:.1f}", "1.00x", f"{hf['peak_rss_mib']:.0f}",
                          f"{hf['generated_incl_padding']} tok generated incl. padding")
    console.print(table)
