"""Side-by-side comparison of the variants of one run: key metrics and ratios to the first.

``ratio = variant / reference`` for every metric, so for throughputs above 1
is better and for latencies and cost below 1 is better (the ``better`` column
says which way each metric points).  Rows a run has no data for are left out
(speculation when no variant drafted, quality without a quality block); the GPU
cost row says "(hypothetical)" when a variant did not run on CUDA, and the
table's caption gives the label (:func:`loom.evals.prices.gpu_cost_label`).
:func:`comparison_table` renders the same as a rich table for the CLI and the demo.
"""

from __future__ import annotations

from typing import Any

from loom.json_types import JSONObject

# (label, path in the summary, "higher" | "lower" is better)
METRICS: list[tuple[str, tuple[str, ...], str]] = [
    ("requests/s", ("benchmark", "request_throughput"), "higher"),
    ("output tok/s", ("benchmark", "output_throughput"), "higher"),
    ("TTFT median ms", ("benchmark", "ttft_ms", "median"), "lower"),
    ("TTFT p99 ms", ("benchmark", "ttft_ms", "p99"), "lower"),
    ("TPOT median ms", ("benchmark", "tpot_ms", "median"), "lower"),
    ("ITL median ms", ("benchmark", "itl_ms", "median"), "lower"),
    ("E2EL median ms", ("benchmark", "e2el_ms", "median"), "lower"),
    ("goodput req/s", ("benchmark", "goodput", "requests_per_s"), "higher"),
    ("prefix hit rate", ("prefix_cache", "hit_rate"), "higher"),
    ("spec acceptance", ("spec", "acceptance_rate"), "higher"),
    ("token $ / request", ("cost", "token_cost_per_request_usd"), "lower"),
    ("GPU $ / request", ("cost", "gpu_cost_per_request_usd"), "lower"),
    # answer quality (qa, tools): rows only when the reference variant has a quality block
    ("accuracy", ("quality", "accuracy"), "higher"),
    ("token $ / correct answer", ("quality", "token_cost_per_correct_usd"), "lower"),
    ("tool pick rate", ("quality", "pick_rate"), "higher"),
    ("valid args rate", ("quality", "valid_args_rate"), "higher"),
]


def _get(summary: JSONObject, path: tuple[str, ...]) -> float | None:
    cur: Any = summary
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return float(cur) if isinstance(cur, (int, float)) else None


def compare_summaries(summaries: list[JSONObject]) -> JSONObject:
    """Metric values per variant and ratios to the first variant (``None`` where undefined)."""
    if not summaries:
        return {}
    ref = summaries[0]
    drafted = any((s.get("spec") or {}).get("num_drafts") for s in summaries)
    hypothetical = any((s.get("cost") or {}).get("gpu_cost_hypothetical") for s in summaries)
    rows = []
    for label, path, better in METRICS:
        if path[0] == "quality" and path[1] not in (ref.get("quality") or {}):
            continue
        if path[0] == "spec" and not drafted:
            continue
        if path[:2] == ("cost", "gpu_cost_per_request_usd") and hypothetical:
            label += " (hypothetical)"
        base = _get(ref, path)
        values = {s["variant"]: _get(s, path) for s in summaries}
        ratios = {name: (v / base if v is not None and base else None) for name, v in values.items()}
        rows.append({"metric": label, "better": better, "values": values, "ratio_to_reference": ratios})
    labels = {s["variant"]: (s.get("cost") or {}).get("gpu_cost_label") for s in summaries}
    return {"reference": ref["variant"], "rows": rows,
            "gpu_cost_labels": {name: label for name, label in labels.items() if label}}


def comparison_table(comparison: JSONObject) -> Any:
    """A ``rich.table.Table``: one row per metric, value and ratio per variant; GPU-cost label as caption."""
    from rich.table import Table

    labels = comparison.get("gpu_cost_labels") or {}
    caption: str | None
    if len(set(labels.values())) == 1:
        caption = f"GPU cost: {next(iter(labels.values()))}"
    else:
        caption = "; ".join(f"GPU cost of {name}: {label}" for name, label in labels.items()) or None
    table = Table(title=f"comparison (ratio to {comparison.get('reference')})", caption=caption)
    table.add_column("metric")
    names = list(comparison["rows"][0]["values"]) if comparison.get("rows") else []
    for name in names:
        table.add_column(name, justify="right")
    for row in comparison.get("rows", []):
        cells = []
        for name in names:
            v, r = row["values"][name], row["ratio_to_reference"][name]
            cells.append("-" if v is None else f"{v:.4g}" + ("" if r is None or name == comparison["reference"]
                                                            else f" ({r:.2f}x)"))
        table.add_row(f"{row['metric']} ({row['better']} better)", *cells)
    return table
