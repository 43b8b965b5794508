"""``loom bench overhead``: host time per decode step, by phase, where the model costs nothing.

On the ``tiny`` preset (hidden 64, 2 layers) a step's model call is a few
hundred microseconds, so what a step costs beyond it is host work that grows
with the batch: scheduling, input preparation, sampling, output processing.
The engine accumulates each phase in ``LLMEngine.step_times``
(``loom.runtime.config.STEP_PHASES``); this benchmark fills the batch, lets every
request reach decode, resets the counters, runs ``--steps`` steps and prints
microseconds per step for each phase, greedy and sampled
(``temperature=1.0, top_p=0.95``).  The budget is at most 1 ms of
host work per step at batch 64; ``model`` is not host work but is printed
for scale.
"""

from __future__ import annotations

import random
import time

import typer

from loom.runtime.config import STEP_PHASES

HOST_PHASES = tuple(p for p in STEP_PHASES if p != "model")


def measure(path: str, batch: int, steps: int, params_kw: dict, seed: int = 0) -> dict[str, float]:
    """µs per step of each phase (and ``host``, ``wall``) for ``batch`` decoding requests."""
    from loom.runtime import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(EngineConfig(model=path, max_num_seqs=max(batch, 1), seed=seed))
    rng = random.Random(seed)
    params = SamplingParams(max_tokens=steps + 64, ignore_eos=True, **params_kw)
    for i in range(batch):
        engine.add_request([rng.randrange(engine.vocab_size - 64) for _ in range(16)], params, request_id=str(i))
    while any(r.num_output_tokens < 2 for r in engine.requests.values()):
        engine.step()
    engine.step_times = dict.fromkeys(STEP_PHASES, 0.0)
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    wall = time.perf_counter() - start
    out = {k: v / steps * 1e6 for k, v in engine.step_times.items()}
    out["host"] = sum(out[p] for p in HOST_PHASES)
    out["wall"] = wall / steps * 1e6
    return out


def overhead(
    arch: str = typer.Option("qwen3", help="Architecture of the random-weight checkpoint."),
    preset: str = typer.Option("tiny", help="Preset (tiny: model compute negligible)."),
    batch_sizes: str = typer.Option("1,64", help="Comma-separated decode batch sizes."),
    steps: int = typer.Option(200, help="Decode steps measured per row."),
    threads: int = typer.Option(1, help="torch threads (host work is single-threaded)."),
) -> None:
    """Microseconds of host work per decode step, by phase, at each batch size.

    Example: loom bench overhead --batch-sizes 1,64 --steps 200
    """
    import torch
    from rich.console import Console
    from rich.table import Table

    from loom.runtime.checkpoint import ensure_checkpoint

    torch.set_num_threads(threads)
    path = str(ensure_checkpoint(arch, preset))
    table = Table(title=f"loom bench overhead — {arch}/{preset}, {threads} torch thread(s), µs per decode step")
    for col in ("batch", "sampling", *STEP_PHASES, "host total", "step wall"):
        table.add_column(col, justify="right")
    modes = {"greedy": {"temperature": 0.0}, "sampled": {"temperature": 1.0, "top_p": 0.95}}
    for batch in (int(b) for b in batch_sizes.split(",")):
        for mode, kw in modes.items():
            r = measure(path, batch, steps, kw)
            table.add_row(str(batch), mode, *(f"{r[p]:.0f}" for p in STEP_PHASES), f"{r['host']:.0f}",
                          f"{r['wall']:.0f}")
    Console(width=200).print(table)
