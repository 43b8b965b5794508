"""``evals.run``: one eval run = a suite, its variants, an optional HF baseline, a report.

Flow: resolve the model to a checkpoint folder
(``loom.runtime.models.loader.resolve_model_path``: a registered name such as the
default ``qwen2.5-coder-0.5b-instruct`` becomes its converted folder, run in its
registered weight format unless ``engine`` names a ``quantization``, a ``.gguf``
file its cached conversion, ``random:ARCH-PRESET`` a random-weight checkpoint
whose answers are noise while timings and token accounting are real), build the
workload from the seed, then for
every variant (the base settings, the suite's own variants such as spec on/off,
and each ``compare``) start a fresh target, run the same workload, and write
``<out>/<variant>/records.jsonl`` + ``summary.json``.  The top-level
``summary.json`` holds every variant and the ratios against the first; the
report (``report.html`` + ``plots/``) is drawn from it.  Ctrl-C stops the
current variant, skips the rest and still writes everything measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any

from loom.evals.compare import compare_summaries
from loom.evals.prices import Prices, load_prices
from loom.evals.runner import VariantResult, run_variant
from loom.evals.settings import parse_variant, split_settings, variant_name
from loom.evals.summary import summarize
from loom.evals.workloads import SUITES, Workload, build
from loom.json_types import JSONObject

logger = logging.getLogger(__name__)

NOISE_NOTE = "random-weight checkpoint: generated text is noise; timings and token accounting are real"
#: Suites that run ``orchestrator.Agent`` in process (no HTTP target, no HF baseline).
AGENT_SUITES = ("rag", "qa", "tools")
#: Suites that score answers: they default to the real default model.
QUALITY_SUITES = ("qa", "tools")


@dataclass
class EvalResult:
    """What ``evals.run`` returns: summaries per variant, ratios, where the files are."""

    out_dir: Path
    summary: JSONObject
    results: list[VariantResult] = field(default_factory=list)
    report_path: Path | None = None
    interrupted: bool = False

    @property
    def variants(self) -> dict[str, JSONObject]:
        return self.summary["variants"]


def resolve_model(model: str | None, suite: str) -> str:
    """A checkpoint folder for ``model`` (``None``: the registry's default real model).

    Raises:
        ModelLoadError: a registered model that cannot be installed or converted.
        NotFoundError: a model that is none of the accepted forms.
    """
    from loom.runtime.checkpoint.registry import default_model
    from loom.runtime.models.loader import resolve_model_path

    return str(resolve_model_path(model or default_model()))


def run(suite: str, model: str | None = None, target: str = "inproc", out: str | Path | None = None,
        compare: list[str] | tuple[str, ...] = (), baseline: str | None = None, concurrency: int | None = None,
        rate: float | None = None, num_requests: int | None = None, seed: int = 0,
        prices: str | Path | Prices | None = None, warmup: int = 2, options: JSONObject | None = None,
        engine: JSONObject | None = None, slos_ms: Mapping[str, object] | None = None, report: bool = True,
        progress: bool | Callable[[str, int, int], None] = False, api_key: str | None = None,
        small: bool = False) -> EvalResult:
    """Run suite ``suite`` and write records, summaries and the report under ``out``.

    Args:
        suite: ``throughput | prefix | sessions | rag | spec | qa | tools``.
        model: checkpoint folder or registered model name (default: ``$LOOM_MODEL``, else
            the registry's default model); a registered name runs in its registered
            weight format (``loom model list``) unless ``engine`` sets ``quantization``.
        target: ``"inproc"`` or ``"http://HOST:PORT"`` (an OpenAI-compatible server;
            ``model`` then only supplies the tokenizer).
        out: output folder (default ``evals-out/<suite>-<time>``).
        compare: variants, each ``"KEY=VALUE[,KEY=VALUE]"`` (see :mod:`loom.evals.settings`).
        baseline: ``"hf"``: the same requests and arrivals through transformers ``generate``
            (one request at a time: the others queue, and their TTFT includes the wait).
        concurrency / rate: conversations in flight / Poisson arrivals per second.
        num_requests: requests (single-turn suites) or conversations (``sessions``, ``rag``);
            for ``qa`` / ``tools`` a seeded sample of the questions / prompts (default all).
        seed: workload and sampling seed (same seed, same requests).
        prices: TOML file or :class:`Prices`.
        warmup: warm-up conversations per variant (not recorded).
        options: suite size overrides (``loom.evals.workloads.DEFAULTS``).
        engine: base ``EngineConfig`` settings for every variant.
        slos_ms: goodput SLOs (``ttft``, ``tpot``, ``e2el``, ``itl``; numbers of ms).
        progress: True for a rich progress bar, or a callable ``(variant, done, total)``.
        small: halve the suite's default number of requests (quick demos).

    Raises:
        ValueError: bad arguments (naming the field). TargetUnreachableError: HTTP target down.
    """
    if suite not in SUITES:
        raise ValueError(f"suite: must be one of {SUITES}, got {suite!r}")
    slos = _check_slos(slos_ms)
    if rate is not None and rate <= 0:
        raise ValueError(f"rate: must be > 0, got {rate}")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
    if baseline not in (None, "hf"):
        raise ValueError(f"baseline: only 'hf' is supported, got {baseline!r}")
    is_http = target != "inproc"
    if is_http and not target.startswith(("http://", "https://")):
        raise ValueError(f"target: must be 'inproc' or http://HOST:PORT, got {target!r}")
    variants = [parse_variant(c) for c in compare]
    if is_http and variants:
        raise ValueError("compare: engine settings cannot be changed on an HTTP target; run `loom serve` per variant")
    if baseline and suite in AGENT_SUITES:
        raise ValueError(f"baseline: the {suite} suite runs the agent; an HF baseline applies to the engine suites")
    if is_http and suite in AGENT_SUITES:
        raise ValueError(f"suite: {suite!r} runs the agent in process; use --target inproc")
    for v in variants:
        split_settings(v)  # fail fast on a bad key
    if is_http:
        asyncio.run(_probe(target, api_key))  # fail fast, before loading anything
    price_table = prices if isinstance(prices, Prices) else load_prices(prices)
    from loom.runtime.checkpoint.registry import registered_format

    # a registered name runs as its user gets it; resolved to its folder below, it would load in float32
    engine = {"quantization": registered_format(model), **(engine or {})}
    model = resolve_model(model, suite)
    out_dir = Path(out) if out is not None else Path("evals-out") / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    if small and num_requests is None:
        from loom.evals.workloads import DEFAULTS

        num_requests = max(2, DEFAULTS[suite]["num_requests"] // 2)
    workload = build(suite, tokenizer, seed=seed, num_requests=num_requests, warmup=warmup, options=options)
    suite_variants = workload.variants or [{}]
    plan = [(variant_name(v), {**(engine or {}), **v}) for v in suite_variants]
    plan += [(variant_name({**suite_variants[0], **v}), {**plan[0][1], **v}) for v in variants]
    meta = {"suite": suite, "model": model, "target": target, "seed": seed, "concurrency": concurrency,
            "rate": rate, "num_requests": workload.num_requests, "warmup": warmup, "options": options or {},
            "engine": engine or {}, "compare": list(compare), "baseline": baseline, "variants": dict(plan),
            "noise_note": NOISE_NOTE if "/checkpoints/" in model else None}
    (out_dir / "workload.json").write_text(json.dumps(workload.to_dict(), indent=1))
    (out_dir / "run.json").write_text(json.dumps(meta, indent=1, default=str))

    res = asyncio.run(_run_all(workload, model, target, plan, baseline, price_table, out_dir, concurrency, rate,
                               slos, progress, api_key))
    res.summary = {**meta, "variants": {r.name: s for r, s in zip(res.results, res.summary["list"])},
                   "comparison": compare_summaries(res.summary["list"]), "interrupted": res.interrupted}
    if baseline and len(res.results) >= 2 and res.results[-1].name == "baseline=hf":
        res.summary["baseline_token_match"] = token_match(res.results[0].records, res.results[-1].records)
    quality = {name: s["quality"] for name, s in res.summary["variants"].items() if "quality" in s}
    if quality:
        res.summary["quality"] = quality
    (out_dir / "summary.json").write_text(json.dumps(res.summary, indent=1, default=str))
    if report and res.results:
        from loom.evals.report import write_report

        res.report_path = write_report(out_dir, res.summary, {r.name: r.records for r in res.results})
    return res


def token_match(a: list[JSONObject], b: list[JSONObject]) -> float | None:
    """Fraction of requests (matched by conversation and turn) whose output ids are identical."""
    ids_b = {(r["conversation"], r["turn"]): r.get("output_ids") for r in b}
    pairs = [(r.get("output_ids"), ids_b.get((r["conversation"], r["turn"]))) for r in a]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    return sum(x == y for x, y in pairs) / len(pairs) if pairs else None


async def _run_all(workload: Workload, model: str, target: str, plan: list[tuple[str, JSONObject]], baseline: str | None,
                   prices: Prices, out_dir: Path, concurrency: int | None, rate: float | None,
                   slos_ms: dict[str, float] | None, progress: Any, api_key: str | None) -> EvalResult:
    res = EvalResult(out_dir, {"list": []})
    bar = _Progress(progress)
    jobs: list[tuple[str, JSONObject, str]] = [(name, s, "main") for name, s in plan]
    if baseline == "hf":
        jobs.append(("baseline=hf", {}, "hf"))
    try:
        for name, settings, kind in jobs:
            tgt = await _make_target(kind, workload, model, target, settings, out_dir / name, api_key)
            try:
                vr = await run_variant(tgt, workload, name, settings, prices, out_dir / name, concurrency, rate,
                                       progress=bar.callback(name, workload.num_requests))
            finally:
                await tgt.close()
            summary = summarize(vr, prices, slos_ms)
            summary["target"] = "hf" if kind == "hf" else tgt.name
            if hasattr(tgt, "summary_extra"):  # qa / tools: accuracy, tool-call rates, index
                summary.update(tgt.summary_extra(vr.records))
            (out_dir / name / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
            res.results.append(vr)
            res.summary["list"].append(summary)
            if vr.interrupted:
                res.interrupted = True
                break
    except asyncio.CancelledError:  # Ctrl-C between variants (e.g. while an engine loads)
        res.interrupted = True
    finally:
        bar.close()
    return res


async def _make_target(kind: str, workload: Workload, model: str, target: str, settings: JSONObject,
                       out_dir: Path, api_key: str | None) -> Any:
    if kind == "hf":
        from loom.evals.targets.hf import HFTarget

        return HFTarget(model)
    if target != "inproc":
        from loom.evals.targets.http import HttpTarget
        from transformers import AutoTokenizer

        key = api_key or os.environ.get("LOOM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        tgt = HttpTarget(target, AutoTokenizer.from_pretrained(model), api_key=key)
        try:
            await tgt.start()
        except BaseException:
            await tgt.close()
            raise
        return tgt
    engine, budget = split_settings(dict(settings))
    engine.setdefault("seed", workload.seed)
    if workload.suite in QUALITY_SUITES:
        from loom.evals.targets.agent import make_agent_target

        return await make_agent_target(workload, model, engine, budget, settings)
    if workload.suite == "rag":
        from loom.evals.targets.rag import RagTarget, corpus_index
        from loom.runtime import AsyncLLM, EngineConfig

        retriever = await asyncio.to_thread(corpus_index, workload.params["corpus"],
                                            workload.params["index_dir"] or None)
        out_dir.mkdir(parents=True, exist_ok=True)
        db = out_dir / "memory.db"
        db.unlink(missing_ok=True)
        llm = await asyncio.to_thread(AsyncLLM.from_config, EngineConfig(model=model, **engine))
        return RagTarget(llm, retriever, f"sqlite:///{db}", budget=budget)
    from loom.evals.targets.inproc import InprocTarget

    if budget:
        raise ValueError(f"compare: budget.* settings apply to the rag suite only, got {sorted(budget)}")
    return await asyncio.to_thread(InprocTarget.from_settings, model, engine)


async def _probe(url: str, api_key: str | None) -> None:
    from loom.evals.targets.http import HttpTarget

    tgt = HttpTarget(url, tokenizer=None, api_key=api_key or os.environ.get("LOOM_API_KEY"))
    try:
        await tgt.start()
    finally:
        await tgt.close()


SLO_NAMES = ("ttft", "tpot", "e2el", "itl")


def _check_slos(slos_ms: Mapping[str, object] | None) -> dict[str, float] | None:
    """``slos_ms`` as numbers of ms (``None``: the default SLOs).

    Raises:
        ValueError: an unknown SLO name, or a limit that is not a number >= 0 (naming it).
    """
    if slos_ms is None:
        return None
    out: dict[str, float] = {}
    for name, limit in slos_ms.items():
        if name not in SLO_NAMES:
            raise ValueError(f"slo {name!r}: must be one of {SLO_NAMES}")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
            raise ValueError(f"slo {name}: expected a number of ms >= 0, got {limit!r}")
        out[name] = float(limit)
    return out


class _Progress:
    """A rich progress bar per variant (or a user callback, or nothing)."""

    def __init__(self, progress: Any) -> None:
        self.user = progress if callable(progress) else None
        self.rich = None
        if progress is True:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), transient=False)
            self.rich.start()

    def callback(self, name: str, total: int) -> Callable[[int, int], None] | None:
        user, rich = self.user, self.rich
        if user is not None:
            return lambda done, tot: user(name, done, tot)
        if rich is None:
            return None
        task = rich.add_task(name, total=total)
        return lambda done, tot: rich.update(task, completed=done)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()
