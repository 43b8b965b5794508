"""Report plots (matplotlib, Agg backend): one figure per question the report answers.

This is the only module that imports matplotlib (the ``eval`` extra:
``pip install 'loom[eval]'``). Every builder returns a ``Figure``, or ``None``
when the run has no data for it, and a panel without data is left out of its
figure: the report shows no empty axes.

* ``latency_cdf``: CDFs of TTFT, TPOT, ITL and E2EL per variant (a panel per metric with values);
* ``class_tokens``: per token class, computed and cached tokens stacked (bar height = the
  class's tokens), one panel per variant;
* ``class_time``: attributed ms per class, stacked, one bar per variant;
* ``class_cost``: token cost and GPU cost (wall time x ``gpu_second``, shared by attributed
  ms) per class, stacked, one bar per variant; the GPU panel's title carries
  ``cost.gpu_cost_label`` (hypothetical off CUDA, :func:`loom.evals.prices.gpu_cost_label`);
* ``turns``: prefix-cache hit rate and median TTFT against turn number (runs with 2+ turns);
* ``spec_acceptance``: acceptance rate per draft position (runs with speculative decoding).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from loom.evals.summary import CLASSES  # noqa: E402
from loom.json_types import JSONObject

Variants = dict[str, JSONObject]
Records = dict[str, list[JSONObject]]

COLORS = {"system": "#4c72b0", "tools": "#64b5cd", "memory": "#8172b2", "history": "#55a868",
          "retrieval": "#ccb974", "tool_result": "#c44e52", "user": "#dd8452", "query_rewrite": "#a6761d",
          "reasoning": "#937860", "tool_call": "#da8bc3", "output": "#8c8c8c", "rewritten_query": "#e6ab02",
          "spec_rejected": "#222222", "recompute": "#b0b0b0"}
COMPUTED_COLOR, CACHED_COLOR = "#c44e52", "#8fbc8f"
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
FIGURE_NAMES = ("latency_cdf", "class_tokens", "class_time", "class_cost", "turns", "spec_acceptance")


def _latency_values(recs: list[JSONObject], key: str) -> list[float]:
    vals = (v for r in recs if r["ok"] for v in (r[key] if key == "itl_ms" else [r[key]]))
    return [v for v in vals if v is not None]


def latency_cdf(records: Records) -> Figure | None:
    """CDF per variant of each latency metric that has values (ms); ``None`` when none has."""
    keys = [k for k in LATENCY_KEYS if any(_latency_values(recs, k) for recs in records.values())]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.6), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for name, recs in records.items():
            xs = np.sort(_latency_values(recs, key))
            if xs.size:
                ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=name)
        ax.set_title(key.replace("_ms", "").upper() + " CDF")
        ax.set_xlabel("ms")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][-1].legend(fontsize=7)
    return fig


def _classes_with(variants: Variants, field: str) -> list[str]:
    return [c for c in CLASSES if any((s["classes"].get(c) or {}).get(field) for s in variants.values())]


def class_tokens(variants: Variants) -> Figure | None:
    """Computed and cached tokens per class, stacked (computed below), one panel per variant.

    The x axis holds the classes with tokens in any variant, prompt classes first;
    above each bar with cached tokens, the cached share. ``None`` when no tokens.
    """
    classes = _classes_with(variants, "tokens")
    if not classes:
        return None
    fig, axes = plt.subplots(1, len(variants), figsize=(max(6.0, 0.55 * len(classes) + 2) * len(variants), 4.2),
                             sharey=True, squeeze=False)
    x = np.arange(len(classes))
    for ax, (name, s) in zip(axes[0], variants.items()):
        rows = [s["classes"].get(c) or {} for c in classes]
        computed = np.array([r.get("computed_tokens", 0) for r in rows], dtype=float)
        cached = np.array([r.get("cached_tokens", 0) for r in rows], dtype=float)
        ax.bar(x, computed, color=COMPUTED_COLOR, label="computed")
        ax.bar(x, cached, bottom=computed, color=CACHED_COLOR, label="cached (prefix cache)")
        for i in np.flatnonzero(cached):
            ax.annotate(f"{cached[i] / (cached[i] + computed[i]):.0%} cached", (x[i], cached[i] + computed[i]),
                        ha="center", va="bottom", fontsize=7)
        hit = (s.get("prefix_cache") or {}).get("hit_rate")
        ax.set_title(name + ("" if hit is None else f" (prompt tokens cached: {hit:.0%})"), fontsize=9)
        ax.set_xticks(x, classes, rotation=35, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    top = max(float((s["classes"].get(c) or {}).get("tokens", 0)) for s in variants.values() for c in classes)
    axes[0][0].set_ylim(0, 1.08 * top)  # room for the labels above the tallest bar (the axes share y)
    axes[0][0].set_ylabel("tokens")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("tokens per class: computed + cached")
    return fig


def _stacked(ax: Any, variants: Variants, value: Callable[[JSONObject], float],
             ticks: list[str]) -> list[str]:
    """One bar per variant, stacked by class; returns the classes drawn."""
    bottom = np.zeros(len(variants))
    drawn = []
    for cls in CLASSES:
        vals = np.array([value(s["classes"].get(cls) or {}) for s in variants.values()], dtype=float)
        if vals.any():
            ax.bar(ticks, vals, bottom=bottom, label=cls, color=COLORS.get(cls))
            bottom += vals
            drawn.append(cls)
    ax.tick_params(axis="x", labelrotation=15, labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    return drawn


def class_time(variants: Variants) -> Figure | None:
    """Attributed ms per class, stacked, one bar per variant; ``None`` when no time was attributed."""
    if not _classes_with(variants, "ms"):
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(variants) + 3), 4))
    _stacked(ax, variants, lambda c: float(c.get("ms") or 0.0), list(variants))
    ax.set_ylabel("attributed ms")
    ax.set_title("attributed ms by token class")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    return fig


def gpu_cost_title(variants: Variants) -> tuple[str, list[str]]:
    """The GPU-cost panel's title and its x tick labels (variants whose cost is a what-if marked).

    One device for all variants: the title carries its ``gpu_cost_label``; mixed
    devices: the hypothetical variants' ticks say ``(hypothetical)``.
    """
    costs = [s.get("cost") or {} for s in variants.values()]
    labels = {c.get("gpu_cost_label") for c in costs}
    if len(labels) == 1:
        label = labels.pop()
        return "GPU cost by token class" + (f"\n{label}" if label else ""), list(variants)
    ticks = [n + ("\n(hypothetical)" if c.get("gpu_cost_hypothetical") else "") for n, c in zip(variants, costs)]
    return "GPU cost by token class\n(hypothetical: priced as if on a GPU where marked)", ticks


def class_cost(variants: Variants) -> Figure | None:
    """Token cost and GPU cost per class (USD), stacked, one bar per variant, in two panels.

    A panel whose costs are all zero is left out; ``None`` when both are.
    """
    panels = [(f, t) for f, t in (("token_cost_usd", "token cost by token class (price table)"),
                                  ("gpu_cost_usd", None)) if _classes_with(variants, f)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6, 1.6 * len(variants) + 3) * len(panels), 4.2),
                             squeeze=False)
    for ax, (field, title) in zip(axes[0], panels):
        ticks = list(variants)
        if title is None:
            title, ticks = gpu_cost_title(variants)
        _stacked(ax, variants, lambda c: float(c.get(field) or 0.0), ticks)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("USD")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    return fig


def turns(variants: Variants) -> Figure | None:
    """Prefix-cache hit rate and median TTFT against turn number; ``None`` without a 2-turn variant."""
    multi = {n: s["by_turn"] for n, s in variants.items() if len(s.get("by_turn") or []) >= 2}
    if not multi:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, rows in multi.items():
        t = [r["turn"] + 1 for r in rows]
        a1.plot(t, [r["hit_rate"] for r in rows], marker="o", label=name)
        a2.plot(t, [r["ttft_median_ms"] or np.nan for r in rows], marker="o", label=name)
    a1.set_title("prefix-cache hit rate vs turn")
    a1.set_ylim(-0.02, 1.02)
    a2.set_title("median TTFT vs turn")
    a2.set_ylabel("ms")
    for ax in (a1, a2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("turn")
        ax.grid(alpha=0.3)
    a2.legend(fontsize=7)
    return fig


def spec_acceptance(variants: Variants) -> Figure | None:
    """Acceptance rate per draft position per variant; ``None`` when no variant speculated."""
    drawn = {n: s["spec"] for n, s in variants.items() if (s.get("spec") or {}).get("acceptance_per_position")}
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, spec in drawn.items():
        per_pos = spec["acceptance_per_position"]
        ax.plot(range(1, len(per_pos) + 1), per_pos, marker="o",
                label=f"{name} (overall {spec['acceptance_rate']:.2f})")
    ax.legend(fontsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("acceptance rate per draft position")
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted / drafts")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return fig


def figures(summary: JSONObject, records: Records) -> dict[str, Figure]:
    """Every figure the run has data for, by name (report order)."""
    variants = summary["variants"]
    built = {"latency_cdf": latency_cdf(records), "class_tokens": class_tokens(variants),
             "class_time": class_time(variants), "class_cost": class_cost(variants),
             "turns": turns(variants), "spec_acceptance": spec_acceptance(variants)}
    return {name: fig for name, fig in built.items() if fig is not None}


def draw_all(out_dir: Path, summary: JSONObject, records: Records) -> dict[str, Path]:
    """Write every figure with data to ``out_dir/plots/<name>.png``; returns name -> path.

    A PNG of a figure this run has no data for (left from an earlier drawing) is removed.
    """
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name, fig in figures(summary, records).items():
        fig.tight_layout()
        fig.savefig(plots / f"{name}.png", dpi=90)
        plt.close(fig)
        out[name] = plots / f"{name}.png"
    for stale in set(FIGURE_NAMES) - set(out):
        (plots / f"{stale}.png").unlink(missing_ok=True)
    return out
