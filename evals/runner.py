"""One variant of a suite against one target: arrivals, warm-up, records, interruption.

Arrival: a fixed number of conversations in flight (``concurrency``), or
Poisson arrivals at ``rate`` conversations per second (exponential gaps drawn
from ``seed``; ``concurrency`` then caps the number in flight), as vLLM's
``benchmark_serving`` does.  Warm-up conversations run first and are not
recorded; engine counters are read after them, so the summary's engine block
covers the measured part only.  Each record is appended to ``records.jsonl``
and flushed as soon as its request ends, and a cancelled run (Ctrl-C) still
returns what it measured, marked ``interrupted``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loom.evals.prices import Prices
from loom.evals.targets.base import RunContext
from loom.evals.workloads import Conversation, Workload
from loom.json_types import JSONObject

logger = logging.getLogger(__name__)

KV_SAMPLE_S = 0.05


@dataclass
class VariantResult:
    """What one variant measured."""

    name: str
    settings: JSONObject
    records: list[JSONObject] = field(default_factory=list)
    duration_s: float = 0.0
    stats_before: JSONObject | None = None
    stats_after: JSONObject | None = None
    kv_usage: list[float] = field(default_factory=list)
    interrupted: bool = False
    concurrency: int | None = None
    rate: float | None = None
    #: torch device type the model ran on (``"cpu"``, ``"cuda"``); ``None``: not visible (HTTP target).
    device: str | None = None
    #: the accelerator's name (``torch.cuda.get_device_name``) on a CUDA run, else ``None``.
    device_name: str | None = None


def arrival_offsets(n: int, rate: float | None, seed: int) -> list[float]:
    """Start offsets (s) of ``n`` conversations: all 0 without a rate, else Poisson arrivals."""
    if not rate or rate == float("inf"):
        return [0.0] * n
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def target_device(target: Any) -> tuple[str | None, str | None]:
    """The device type the target's model runs on and, for CUDA, the accelerator's name.

    Read from the target's ``device`` (the HF baseline) or its engine's
    ``EngineConfig.torch_device()`` (in-process targets); ``(None, None)`` when
    the target does not show it (an HTTP server).
    """
    device = getattr(target, "device", None)
    if device is None:
        config = getattr(getattr(target, "llm", None), "config", None)
        device = config.torch_device() if config is not None and hasattr(config, "torch_device") else None
    if device is None:
        return None, None
    import torch

    device = torch.device(device)
    return device.type, torch.cuda.get_device_name(device) if device.type == "cuda" else None


async def settled_stats(target: Any, timeout_s: float = 2.0) -> JSONObject | None:
    """Engine counters once nothing runs or waits (``AsyncLLM.stats`` is a per-step snapshot that
    can trail the last delivered output by one step)."""
    await target.refresh()
    stats = target.stats()
    deadline = time.monotonic() + timeout_s
    while stats is not None and (stats.get("num_running") or stats.get("num_waiting")) \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
        await target.refresh()
        stats = target.stats()
    return stats


async def _sample_kv(target: Any, sink: list[float]) -> None:
    while True:
        await target.refresh()
        stats = target.stats()
        if stats and stats.get("kv_blocks_total"):
            sink.append(1.0 - stats["kv_blocks_free"] / stats["kv_blocks_total"])
        await asyncio.sleep(KV_SAMPLE_S)


async def run_variant(target: Any, workload: Workload, name: str, settings: JSONObject, prices: Prices,
                      out_dir: Path, concurrency: int | None = None, rate: float | None = None,
                      progress: Any = None) -> VariantResult:
    """Run ``workload`` through ``target``; write ``out_dir/records.jsonl``; return the measurements.

    Args:
        progress: optional callable ``progress(n_done, n_total)`` after each request.
    """
    conc = concurrency or (None if rate else workload.params.get("concurrency", 1))
    result = VariantResult(name, settings, concurrency=conc, rate=rate)
    result.device, result.device_name = target_device(target)
    out_dir.mkdir(parents=True, exist_ok=True)
    sink = (out_dir / "records.jsonl").open("w")
    total = workload.num_requests

    def emit(rec: JSONObject) -> None:
        rec["suite"] = workload.suite
        result.records.append(rec)
        sink.write(json.dumps(rec) + "\n")
        sink.flush()
        if progress is not None:
            progress(len(result.records), total)

    t0 = time.monotonic()
    warm_ctx = RunContext(name, prices, t0, lambda rec: None, workload.ignore_eos, workload.seed)
    kv_task: asyncio.Task | None = None
    tasks: list[asyncio.Task] = []
    try:
        await _gather(target, workload.warmup, warm_ctx, conc, [0.0] * len(workload.warmup))
        result.stats_before = await settled_stats(target)
        kv_task = asyncio.create_task(_sample_kv(target, result.kv_usage))
        t0 = time.monotonic()
        ctx = RunContext(name, prices, t0, emit, workload.ignore_eos, workload.seed)
        offsets = arrival_offsets(len(workload.conversations), rate, workload.seed)
        tasks = [asyncio.create_task(_gather(target, workload.conversations, ctx, conc, offsets))]
        await asyncio.gather(*tasks)
    except (asyncio.CancelledError, KeyboardInterrupt):
        result.interrupted = True
        logger.warning("variant %s interrupted after %d requests", name, len(result.records))
        for t in tasks:
            t.cancel()
    finally:
        result.duration_s = time.monotonic() - t0
        if kv_task is not None:
            kv_task.cancel()
        sink.close()
    result.stats_after = target.stats() if result.interrupted else await settled_stats(target)
    return result


async def _gather(target: Any, convs: list[Conversation], ctx: RunContext, concurrency: int | None,
                  offsets: list[float]) -> None:
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    start = time.monotonic()

    async def one(conv: Conversation, offset: float) -> None:
        delay = start + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if sem is None:
            await target.conversation(conv, ctx)
            return
        async with sem:
            await target.conversation(conv, ctx)

    tasks = [asyncio.create_task(one(c, o)) for c, o in zip(convs, offsets)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
