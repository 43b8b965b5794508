"""Report plots (matplotlib, Agg backend): one PNG per question the report answers.

* ``latency_cdf.png``: CDFs of TTFT, TPOT, ITL and E2EL per variant;
* ``class_tokens.png`` / ``class_time.png`` / ``class_cost.png``: tokens, attributed
  ms and cost (token price + GPU share) per token class, stacked, one bar per variant;
* ``turns.png``: prefix-cache hit rate and median TTFT against turn number;
* ``spec_acceptance.png``: acceptance rate per draft position (and overall).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evals.summary import CLASSES  # noqa: E402

COLORS = {"system": "#4c72b0", "tools": "#64b5cd", "memory": "#8172b2", "history": "#55a868",
          "retrieval": "#ccb974", "tool_result": "#c44e52", "user": "#dd8452", "reasoning": "#937860",
          "tool_call": "#da8bc3", "output": "#8c8c8c", "spec_rejected": "#222222",
          "recompute": "#b0b0b0"}


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def latency_cdf(records: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, key in zip(axes, ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")):
        for name, recs in records.items():
            vals = [v for r in recs if r["ok"] for v in (r[key] if key == "itl_ms" else [r[key]]) if v is not None]
            if vals:
                xs = np.sort(vals)
                ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=name)
        ax.set_title(key.replace("_ms", "").upper() + " CDF")
        ax.set_xlabel("ms")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=7)
    return _save(fig, path)


def class_bars(variants: dict[str, dict[str, Any]], field: str, ylabel: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(variants) + 3), 4))
    names = list(variants)
    bottom = np.zeros(len(names))
    for cls in CLASSES:
        vals = np.array([_class_value(variants[n]["classes"].get(cls, {}), field) for n in names], dtype=float)
        if vals.any():
            ax.bar(names, vals, bottom=bottom, label=cls, color=COLORS.get(cls))
            bottom += vals
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} by token class")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.tick_params(axis="x", labelrotation=15, labelsize=7)
    return _save(fig, path)


def _class_value(c: dict[str, Any], field: str) -> float:
    if field == "cost":
        return float(c.get("token_cost_usd", 0.0)) + float(c.get("gpu_cost_usd", 0.0))
    return float(c.get(field, 0.0) or 0.0)


def turns(variants: dict[str, dict[str, Any]], path: Path) -> Path:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, s in variants.items():
        rows = s.get("by_turn") or []
        t = [r["turn"] + 1 for r in rows]
        a1.plot(t, [r["hit_rate"] for r in rows], marker="o", label=name)
        a2.plot(t, [r["ttft_median_ms"] or np.nan for r in rows], marker="o", label=name)
    from matplotlib.ticker import MaxNLocator

    for ax in (a1, a2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    a1.set_title("prefix-cache hit rate vs turn")
    a1.set_xlabel("turn")
    a1.set_ylim(-0.02, 1.02)
    a2.set_title("median TTFT vs turn")
    a2.set_xlabel("turn")
    a2.set_ylabel("ms")
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
    if a2.get_legend_handles_labels()[0]:
        a2.legend(fontsize=7)
    return _save(fig, path)


def spec_acceptance(variants: dict[str, dict[str, Any]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    drawn = False
    for name, s in variants.items():
        per_pos = (s.get("spec") or {}).get("acceptance_per_position")
        if per_pos:
            ax.plot(range(1, len(per_pos) + 1), per_pos, marker="o",
                    label=f"{name} (overall {s['spec']['acceptance_rate']:.2f})")
            drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "no speculative decoding in this run", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=7)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("acceptance rate per draft position")
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted / drafts")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def draw_all(out_dir: Path, summary: dict[str, Any], records: dict[str, list[dict[str, Any]]]) -> dict[str, Path]:
    """Every plot of the report, written to ``out_dir/plots``; returns name -> path."""
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    variants = summary["variants"]
    return {
        "latency_cdf": latency_cdf(records, plots / "latency_cdf.png"),
        "class_tokens": class_bars(variants, "tokens", "tokens", plots / "class_tokens.png"),
        "class_time": class_bars(variants, "ms", "attributed ms", plots / "class_time.png"),
        "class_cost": class_bars(variants, "cost", "cost (USD)", plots / "class_cost.png"),
        "turns": turns(variants, plots / "turns.png"),
        "spec_acceptance": spec_acceptance(variants, plots / "spec_acceptance.png"),
    }
