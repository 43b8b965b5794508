"""``loom eval run`` and ``loom eval report``: run a suite, print the figures, write records, summaries
and the report (the suites themselves are :mod:`loom.evals`).

``loom eval run`` shows a bar of the requests done per variant on stderr
(:mod:`loom.cli.progress`); the tables go to stdout.

Example::

    loom eval run --suite sessions --compare enable_prefix_caching=false --out evals-out/sessions
    loom eval run --suite throughput --target http://127.0.0.1:8000 --rate 4 --num-requests 64
    loom eval run --suite qa --num-requests 20      # answer accuracy with and without retrieval
    loom eval run --suite qa --qa-sets click,jinja  # only these documentation sets
    loom eval run --suite tools                     # right tool, valid arguments, unforced
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

eval_app = typer.Typer(name="eval", help="Evals: latency, tokens and cost per token class, with reports.",
                       no_args_is_help=True)


@eval_app.callback()
def _group() -> None:
    """Evals: latency, tokens and cost per token class, with reports."""


def _pairs(items: list[str] | None, what: str) -> dict[str, object]:
    from loom.evals.settings import parse_value

    out: dict[str, object] = {}
    for item in items or []:
        if "=" not in item:
            raise typer.BadParameter(f"{what}: expected KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = parse_value(value.strip())
    return out


@eval_app.command("run")
def run_cmd(
    suite: str = typer.Option(..., "--suite", help="throughput | prefix | sessions | rag | spec | qa | tools"),
    model: Optional[str] = typer.Option(None, "--model", help="Registered model name (default "
                                        "smollm2-135m-instruct), folder, .gguf file or random:ARCH-PRESET "
                                        "(random weights: answers are noise). For HTTP: the tokenizer."),
    target: str = typer.Option("inproc", "--target", help="inproc, or http://HOST:PORT of an OpenAI-compatible "
                               "server."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default evals-out/<suite>-<time>)."),
    compare: Optional[list[str]] = typer.Option(None, "--compare", help="A variant KEY=VALUE[,KEY=VALUE] "
                                                "(engine, speculative or budget.* setting); repeatable."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="'hf': same requests through transformers."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Conversations in flight."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Poisson arrivals (conversations per second)."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="Requests (or conversations for "
                                               "sessions/rag; a seeded sample of questions/prompts for qa/tools)."),
    seed: int = typer.Option(0, "--seed", help="Workload and sampling seed."),
    prices: Optional[Path] = typer.Option(None, "--prices", help="Price table (TOML)."),
    warmup: int = typer.Option(2, "--warmup", help="Warm-up conversations per variant (not recorded)."),
    option: Optional[list[str]] = typer.Option(None, "--option", help="Suite size KEY=VALUE (e.g. turns=8)."),
    qa_sets: Optional[str] = typer.Option(None, "--qa-sets", help="qa: question sets to run, comma-separated "
                                          "(stdlib, click, jinja; default all)."),
    engine: Optional[list[str]] = typer.Option(None, "--engine", help="Base engine setting KEY=VALUE."),
    slo: Optional[list[str]] = typer.Option(None, "--slo", help="Goodput SLO in ms, e.g. ttft=500 tpot=30."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="LOOM_API_KEY", help="Bearer key (HTTP)."),
) -> None:
    """Run an eval suite and write records.jsonl, summary.json and report.html."""
    from rich.console import Console

    from loom.cli.logs import quiet_logs
    from loom.cli.progress import bar
    from loom.evals.compare import comparison_table
    from loom.evals.harness import run
    from loom.evals.targets.http import TargetUnreachableError

    quiet_logs()
    console = Console(stderr=True)
    options = _pairs(option, "option")
    if qa_sets:
        options["sets"] = qa_sets
    try:
        with bar() as update:
            res = run(suite, model=model, target=target, out=out, compare=compare or [], baseline=baseline,
                      concurrency=concurrency, rate=rate, num_requests=num_requests, seed=seed, prices=prices,
                      warmup=warmup, options=options, engine=_pairs(engine, "engine"),
                      slos_ms=_pairs(slo, "slo") or None, progress=update, api_key=api_key)
    except TargetUnreachableError as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        raise typer.Exit(2) from None
    except (ValueError, FileNotFoundError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    out_console = Console()
    out_console.print(summary_table(res.summary))
    if res.summary.get("quality"):
        out_console.print(classes_table(res.summary))
    if len(res.variants) > 1:
        out_console.print(comparison_table(res.summary["comparison"]))
    out_console.print(f"records, summaries and report in [bold]{res.out_dir}[/]"
                      + (f" (report: {res.report_path})" if res.report_path else ""))
    if res.interrupted:
        console.print("[yellow]interrupted: wrote what was measured[/]")
        sys.exit(130)


@eval_app.command("report")
def report_cmd(out: Path = typer.Argument(..., help="Output folder of an earlier `loom eval run`.")) -> None:
    """Re-draw report.html and the plots from a run's summary.json and records."""
    import importlib.util
    import json
    import logging

    from loom.evals.report import PLOTS_NEED_EXTRA, write_report

    if importlib.util.find_spec("matplotlib") is None:  # one plain line, not a log record
        typer.secho(PLOTS_NEED_EXTRA, fg="yellow", err=True)
        logging.getLogger("loom.evals.report").setLevel(logging.ERROR)

    summary = json.loads((out / "summary.json").read_text())
    records = {name: [json.loads(x) for x in (out / name / "records.jsonl").read_text().splitlines()]
               for name in summary["variants"]}
    typer.echo(str(write_report(out, summary, records)))


def summary_table(summary: dict) -> object:
    """Rich table of the headline figures: one row per metric, one column per variant."""
    from rich.table import Table

    variants = summary["variants"]
    table = Table(title=f"eval {summary['suite']} ({summary['num_requests']} requests per variant)")
    table.add_column("metric")
    for name in variants:
        table.add_column(name, justify="right")

    def ms(s: dict, key: str, stat: str) -> str:
        v = s["benchmark"][key].get(stat)
        return "-" if v is None else f"{v:.1f}"

    rows = [
        ("ok / failed", lambda s: f"{s['benchmark']['completed']} / {s['benchmark']['failed']}"),
        ("duration s", lambda s: f"{s['benchmark']['duration_s']:.2f}"),
        ("requests/s", lambda s: f"{s['benchmark']['request_throughput']:.2f}"),
        ("output tok/s", lambda s: f"{s['benchmark']['output_throughput']:.1f}"),
        ("TTFT median / p99 ms", lambda s: f"{ms(s, 'ttft_ms', 'median')} / {ms(s, 'ttft_ms', 'p99')}"),
        ("TPOT median / p99 ms", lambda s: f"{ms(s, 'tpot_ms', 'median')} / {ms(s, 'tpot_ms', 'p99')}"),
        ("ITL median / p99 ms", lambda s: f"{ms(s, 'itl_ms', 'median')} / {ms(s, 'itl_ms', 'p99')}"),
        ("E2EL median / p99 ms", lambda s: f"{ms(s, 'e2el_ms', 'median')} / {ms(s, 'e2el_ms', 'p99')}"),
        ("goodput req/s", lambda s: f"{s['benchmark']['goodput']['requests_per_s']:.2f}"),
        ("prefix hit rate", lambda s: f"{s['prefix_cache']['hit_rate']:.1%}"),
        ("spec acceptance", lambda s: f"{s['spec']['acceptance_rate']:.2f}"),
        ("preemptions", lambda s: str(s["engine"]["num_preemptions"])),
        ("token cost $", lambda s: f"{s['cost']['token_cost_usd']:.6f}"),
        ("GPU cost $", lambda s: f"{s['cost']['gpu_cost_usd']:.6f}"),
    ]
    for label, fn in rows + quality_rows(variants):
        table.add_row(label, *[fn(s) for s in variants.values()])
    return table


def classes_table(summary: dict) -> object:
    """Rich table of tokens (cached share) and token cost per class, one column per variant."""
    from rich.table import Table

    from loom.evals.summary import CLASSES

    variants = summary["variants"]
    table = Table(title="tokens and cost per class")
    table.add_column("class")
    for name in variants:
        table.add_column(f"{name} tokens (cached)", justify="right")
        table.add_column(f"{name} $", justify="right")
    for cls in CLASSES:
        cells = [(s["classes"].get(cls) or {}) for s in variants.values()]
        if not any(c.get("tokens") for c in cells):
            continue
        row = [cls]
        for c in cells:
            row += [f"{c.get('tokens', 0)} ({c.get('cached_tokens', 0)})", f"{c.get('token_cost_usd', 0.0):.6f}"]
        table.add_row(*row)
    return table


def quality_rows(variants: dict[str, Any]) -> list[Any]:
    """Table rows of the ``quality`` blocks (``qa``, ``tools``), when the variants have them."""
    first_variant: dict[str, Any] = next(iter(variants.values()), {})
    first = first_variant.get("quality")
    if not first:
        return []

    def pct(key: str):
        return lambda s: "-" if s.get("quality", {}).get(key) is None else f"{s['quality'][key]:.1%}"

    if "accuracy" in first:
        rows = [("accuracy", lambda s: f"{s['quality']['correct']} / {s['quality']['questions']} "
                                       f"({s['quality']['accuracy']:.1%})"),
                ("fact recall", pct("fact_recall")),
                ("answer in retrieved chunks", pct("facts_in_context_rate")),
                ("copy baseline accuracy", pct("copy_baseline_accuracy")),
                ("past the first sentence: accuracy", pct("later_accuracy")),
                ("past the first sentence: copy baseline", pct("later_copy_baseline_accuracy")),
                ("citation precision", pct("citation_precision")),
                ("not found (unanswerable)", pct("not_found_rate")),
                ("mean answer tokens", lambda s: f"{s['quality']['mean_answer_tokens']:.1f}")]
        for name in first.get("by_set") or {}:
            rows.append((f"{name}: accuracy / cited gold / not found", _set_cell(name)))
        return rows
    return [("tool pick rate", pct("pick_rate")), ("valid args rate", pct("valid_args_rate")),
            ("schema-valid rate", pct("schema_valid_rate")), ("no call rate", pct("no_call_rate")),
            ("wrong tool rate", pct("wrong_tool_rate")), ("no-tool prompts: no call", pct("no_tool_abstain_rate"))]


def _set_cell(name: str):
    """``accuracy / citation precision / not-found rate`` of one question set, ``-`` where undefined."""
    def cell(s: dict) -> str:
        block = (s.get("quality", {}).get("by_set") or {}).get(name) or {}
        keys = ("accuracy", "citation_precision", "not_found_rate")
        return " / ".join("-" if block.get(k) is None else f"{block[k]:.1%}" for k in keys)
    return cell
