"""BFCL v4 tool-calling accuracy of a model served by Loom: ``python -m loom.evals.bfcl``.

Runs the Berkeley Function Calling Leaderboard's categories (Patil et al.,
"Gorilla: Large Language Model Connected with Massive APIs", and BFCL v4,
https://gorilla.cs.berkeley.edu/leaderboard.html) through Loom's agent loop
on the in-process engine, and scores them with BFCL's own checkers
(:mod:`loom.evals.bfcl_data`, :mod:`loom.evals.bfcl_run`,
:mod:`loom.evals.bfcl_score`).  Needs ``bfcl-eval``, which lives in
``.venv-bfcl`` (``make bfcl-env``)::

    .venv-bfcl/bin/python -m loom.evals.bfcl --model smollm2-135m-instruct \\
        --categories simple_python,irrelevance --modes free,constrained --limit 50 --out bfcl-out

Writes ``records.jsonl`` (one line per entry and mode, as soon as it is
scored) and ``summary.json`` (per category and mode: accuracy, count,
schema-valid rate, ms per correct answer, tokens; the leaderboard's groupings;
the settings and torch threads) to ``--out``, and prints the table.
``irrelevance`` is not run in the forced modes: a forced call cannot abstain,
so its score there is 0 by construction.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject

from loom.evals.bfcl_data import CATEGORIES, load_entries
from loom.evals.bfcl_run import MODES, run_entry
from loom.evals.bfcl_score import groupings, record, summarize

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"


def applies(category: str, mode: str) -> bool:
    """Whether ``category`` is run in ``mode`` (irrelevance only unforced)."""
    return not (category == "irrelevance" and mode != "free")


async def _run_category(llm: Any, category: str, mode: str, limit: int | None, max_tokens: int,
                        max_steps: int | None, concurrency: int, sink: Any) -> tuple[list[JSONObject], float]:
    entries = load_entries(category, limit)
    gate = asyncio.Semaphore(concurrency)
    records: list[JSONObject] = []

    async def one(entry: Any) -> None:
        async with gate:
            run = await run_entry(llm, entry, mode, max_tokens, max_steps)
        rec = await asyncio.to_thread(record, entry, mode, run)
        records.append(rec)
        sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
        sink.flush()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(e) for e in entries))
    order = {e.id: i for i, e in enumerate(entries)}
    return sorted(records, key=lambda r: order[r["id"]]), (time.perf_counter() - t0) * 1000.0


async def run_bfcl(model: str = DEFAULT_MODEL, categories: tuple[str, ...] = CATEGORIES,
                   modes: tuple[str, ...] = ("free", "constrained"), limit: int | None = None,
                   multi_turn_limit: int | None = None, out: Path | None = None, max_tokens: int = 256,
                   max_steps: int | None = None, concurrency: int = 1, threads: int = 1,
                   engine: JSONObject | None = None) -> JSONObject:
    """Run ``categories`` x ``modes`` on ``model``; return the summary (also written to ``out``).

    Args:
        limit: the first ``limit`` entries of each single-turn category (file order; ``None``: all).
        multi_turn_limit: the same for ``multi_turn_*`` (default ``limit``).
        max_tokens: output tokens per model call.
        max_steps: model calls per multi-turn turn (default BFCL's step limit + 1).
        concurrency: entries in flight at once (continuous batching); 1 = one at a time.
        threads: ``torch.set_num_threads`` for the run.
        engine: extra ``runtime.EngineConfig`` fields.

    Raises:
        ValueError: an unknown category or mode.
        ImportError: ``bfcl_eval`` missing (run in ``.venv-bfcl``).
    """
    import torch

    from loom.runtime import AsyncLLM, EngineConfig

    for c in categories:
        if c not in CATEGORIES:
            raise ValueError(f"categories: one of {', '.join(CATEGORIES)} expected, got {c!r}")
    for m in modes:
        if m not in MODES:
            raise ValueError(f"modes: one of {', '.join(MODES)} expected, got {m!r}")
    torch.set_num_threads(threads)
    out = out or Path("bfcl-out") / model.replace("/", "_")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    llm = await asyncio.to_thread(AsyncLLM.from_config, EngineConfig(model=model, **(engine or {})))
    records: list[JSONObject] = []
    wall: dict[tuple[str, str], float] = {}
    try:
        with (out / "records.jsonl").open("w") as sink:
            for category in categories:
                n = multi_turn_limit if category.startswith("multi_turn") and multi_turn_limit else limit
                for mode in (m for m in modes if applies(category, m)):
                    recs, ms = await _run_category(llm, category, mode, n, max_tokens, max_steps, concurrency, sink)
                    records += recs
                    wall[(category, mode)] = ms
                    logger.info("%s %s: %d/%d in %.0f s", category, mode, sum(r["valid"] for r in recs),
                                len(recs), ms / 1000.0)
    finally:
        await asyncio.to_thread(llm.shutdown)
    scores = summarize(records, wall)
    summary: JSONObject = {
        "model": model, "categories": [s.to_dict() for s in scores], "groupings": groupings(scores),
        "settings": {"limit": limit, "multi_turn_limit": multi_turn_limit or limit, "max_tokens": max_tokens,
                     "max_steps": max_steps, "concurrency": concurrency, "torch_threads": threads,
                     "engine": engine or {}, "sample": "the first N entries of each category, file order"},
        "wall_s": round(time.perf_counter() - t0, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table(summary: JSONObject) -> Any:
    """The summary as a rich ``Table``: one row per category and mode, then the groupings."""
    from rich.table import Table

    t = Table(title=f"BFCL v4 - {summary['model']}")
    for col in ("category", "mode", "accuracy", "n", "schema-valid", "calls", "ms/correct", "prompt tok",
                "cached", "completion tok"):
        t.add_column(col, justify="left" if col in ("category", "mode") else "right")
    for c in summary["categories"]:
        t.add_row(c["category"], c["mode"], _pct(c["accuracy"]), str(c["count"]), _pct(c["schema_valid_rate"]),
                  str(c["calls"]), "-" if c["ms_per_correct"] is None else f"{c['ms_per_correct']:.0f}",
                  str(c["tokens"]["prompt"]), str(c["tokens"]["cached"]), str(c["tokens"]["completion"]))
    for mode, groups in summary["groupings"].items():
        for name, acc in groups.items():
            t.add_row(f"[b]{name}[/b]", mode, _pct(acc), "", "", "", "", "", "", "")
    return t


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m loom.evals.bfcl", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--categories", default=",".join(CATEGORIES), help="comma-separated BFCL categories")
    p.add_argument("--modes", default="free,constrained", help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--limit", type=int, default=None, help="first N entries per category (default all)")
    p.add_argument("--multi-turn-limit", type=int, default=None, help="first N multi-turn entries (default --limit)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per model call")
    p.add_argument("--max-steps", type=int, default=None, help="model calls per multi-turn turn (default 21)")
    p.add_argument("--concurrency", type=int, default=1, help="entries in flight at once")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=None, help="output folder (default bfcl-out/<model>)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    summary = asyncio.run(run_bfcl(a.model, tuple(a.categories.split(",")), tuple(a.modes.split(",")), a.limit,
                                   a.multi_turn_limit, a.out, a.max_tokens, a.max_steps, a.concurrency, a.threads))
    from rich.console import Console

    Console(width=140).print(table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
