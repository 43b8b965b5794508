"""The HTML report: one self-contained page (plots embedded as PNG data URIs, also in ``plots/``).

Sections: run settings, the comparison table (ratios to the first variant;
only with two or more variants), the vLLM-style benchmark block per variant
(device included; speculation rows only when a variant drafted), the
per-class table (tokens, cached, computed, share, ms, ms per 1k tokens, cost
per 1M tokens), then the plots of :mod:`loom.evals.plots` that have data.  GPU
cost is labelled as :func:`loom.evals.prices.gpu_cost_label` says: a what-if off
CUDA ("hypothetical: priced as if on H100 ... (this run was on CPU)").

The plots need matplotlib (the ``eval`` extra); without it the report is
written without them and :data:`PLOTS_NEED_EXTRA` is logged once, as a warning.
"""

from __future__ import annotations

import base64
import html
import logging
from pathlib import Path
from typing import Any

from loom.evals.summary import CLASSES
from loom.json_types import JSONObject

logger = logging.getLogger(__name__)

PLOTS_NEED_EXTRA = "plots need the eval extra: pip install 'loom[eval]'"

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.4em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;
text-align:right}th:first-child,td:first-child{text-align:left}h2{margin-top:1.6em}img{max-width:100%}
.note{color:#666;font-size:13px}"""

PLOT_TITLES = {"latency_cdf": "Latency CDFs", "class_tokens": "Tokens per class: computed and cached",
               "class_time": "Time per class",
               "class_cost": "Cost per class", "turns": "Cache hit rate and TTFT vs turn",
               "spec_acceptance": "Speculative acceptance per draft position"}


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _benchmark(variants: dict[str, JSONObject]) -> str:
    names = list(variants)
    rows: list[list[Any]] = []
    for key in ("completed", "failed", "duration_s", "request_throughput", "output_throughput",
                "total_token_throughput"):
        rows.append([key] + [variants[n]["benchmark"][key] for n in names])
    for key in ("ttft_ms", "ttft_content_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        for stat in ("mean", "median", "p90", "p99"):
            rows.append([f"{key} {stat}"] + [variants[n]["benchmark"][key].get(stat) for n in names])
    rows.append(["goodput req/s"] + [variants[n]["benchmark"]["goodput"]["requests_per_s"] for n in names])
    rows.append(["prefix hit rate"] + [variants[n]["prefix_cache"]["hit_rate"] for n in names])
    if any(variants[n]["spec"]["num_drafts"] for n in names):
        rows.append(["spec acceptance rate"] + [variants[n]["spec"]["acceptance_rate"] for n in names])
        rows.append(["spec mean acceptance length"] + [variants[n]["spec"]["mean_acceptance_length"]
                                                       for n in names])
    rows.append(["preemptions"] + [variants[n]["engine"]["num_preemptions"] for n in names])
    rows.append(["KV usage peak"] + [variants[n]["engine"]["kv_usage_peak"] for n in names])
    rows.append(["token cost USD"] + [variants[n]["cost"]["token_cost_usd"] for n in names])
    rows.append([_gpu_header("GPU cost USD", variants.values())] + [variants[n]["cost"]["gpu_cost_usd"]
                                                                     for n in names])
    rows.append(["device"] + [_device(variants[n]) for n in names])
    return _table(["metric"] + names, rows) + _gpu_notes(variants)


def _hypothetical(s: JSONObject) -> bool:
    return bool(s.get("cost", {}).get("gpu_cost_hypothetical"))


def _gpu_header(text: str, summaries: Any) -> str:
    return text + (" (hypothetical)" if any(_hypothetical(s) for s in summaries) else "")


def _device(s: JSONObject) -> str:
    d = s.get("device") or {}
    if not d.get("type"):
        return "not known"
    return d["type"] + (f" ({d['name']})" if d.get("name") else "")


def _gpu_notes(variants: dict[str, JSONObject]) -> str:
    """One line per distinct GPU-cost label (naming the variants when they differ)."""
    by_label: dict[str, list[str]] = {}
    for name, s in variants.items():
        label = s.get("cost", {}).get("gpu_cost_label")
        if label:
            by_label.setdefault(label, []).append(name)
    if len(by_label) == 1:
        return f"<p class=note>GPU cost: {html.escape(next(iter(by_label)))}</p>"
    return "".join(f"<p class=note>GPU cost of {html.escape(', '.join(names))}: {html.escape(label)}</p>"
                   for label, names in by_label.items())


def _classes(name: str, s: JSONObject) -> str:
    rows = []
    for cls in CLASSES:
        c = s["classes"].get(cls)
        if c and c["tokens"]:
            rows.append([cls, c["tokens"], c["cached_tokens"], c["computed_tokens"], c["share"], c["ms"],
                         c["ms_per_1k_tokens"], c["token_cost_usd"], c["gpu_cost_usd"], c["cost_per_1m_tokens"]])
    return f"<h3>{html.escape(name)}</h3>" + _table(
        ["class", "tokens", "cached", "computed", "share", "ms", "ms / 1k tok", "token $",
         _gpu_header("GPU $", [s]), "$ / 1M tok"], rows)


def _quality(variants: dict[str, JSONObject]) -> str:
    """Scalar figures of the ``quality`` blocks (``qa``: accuracy ...; ``tools``: call rates), one column each."""
    names = [n for n, s in variants.items() if s.get("quality")]
    keys = [k for k, v in variants[names[0]]["quality"].items() if not isinstance(v, dict)] if names else []
    return _table(["metric"] + names, [[k] + [variants[n]["quality"].get(k) for n in names] for k in keys])


def _comparison(comp: JSONObject) -> str:
    names = list(comp["rows"][0]["values"])
    rows = [[f"{r['metric']} ({r['better']} better)"]
            + [f"{_fmt(r['values'][n])} ({_fmt(r['ratio_to_reference'][n])}x)" for n in names]
            for r in comp["rows"]]
    return _table(["metric"] + names, rows)


def _plots(out_dir: Path, summary: JSONObject, records: dict[str, list[JSONObject]]) -> list[str]:
    """The plots section (empty when the run has no plot data or matplotlib is missing)."""
    try:
        from loom.evals.plots import draw_all
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        logger.warning(PLOTS_NEED_EXTRA)
        return ["<h2>Plots</h2>", f"<p class=note>{html.escape(PLOTS_NEED_EXTRA)}</p>"]
    plots = draw_all(out_dir, summary, records)
    parts = ["<h2>Plots</h2>"] if plots else []
    for key, path in plots.items():
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<h3>{PLOT_TITLES[key]}</h3><img id='{key}' alt='{key}' "
                     f"src='data:image/png;base64,{data}'>")
    return parts


def write_report(out_dir: Path, summary: JSONObject, records: dict[str, list[JSONObject]]) -> Path:
    """Draw the plots the run has data for and write ``out_dir/report.html``; returns its path.

    Without matplotlib the page is written without plots (see :data:`PLOTS_NEED_EXTRA`).
    """
    variants = summary["variants"]
    parts = [f"<!doctype html><html><head><meta charset=utf-8><title>Loom eval: {html.escape(summary['suite'])}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>Loom eval: {html.escape(summary['suite'])}</h1>",
             _table(["setting", "value"], [[k, summary.get(k)] for k in
                                           ("model", "target", "seed", "num_requests", "concurrency", "rate",
                                            "warmup", "compare", "baseline", "interrupted")])]
    if summary.get("noise_note"):
        parts.append(f"<p class=note>{html.escape(summary['noise_note'])}</p>")
    if any(s.get("quality") for s in variants.values()):
        parts += ["<h2>Answer quality</h2>", _quality(variants)]
    comp = summary.get("comparison") or {}
    if comp.get("rows") and len(comp["rows"][0]["values"]) >= 2:
        parts += ["<h2>Comparison</h2>", _comparison(comp)]
    parts += ["<h2>Benchmark (vLLM definitions)</h2>", _benchmark(variants),
              "<h2>Tokens, time and cost per class</h2>"]
    parts += [_classes(n, s) for n, s in variants.items()]
    parts += _plots(out_dir, summary, records)
    parts.append("</body></html>")
    path = out_dir / "report.html"
    path.write_text("\n".join(parts))
    return path
