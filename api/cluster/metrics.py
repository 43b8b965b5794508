"""``/metrics`` of the ingress: every replica's series, their aggregate and the router's own.

Replica texts are parsed with ``prometheus_client``'s parser and written back in the text
exposition format with a ``replica="N"`` label, then once more summed over replicas with
``replica="all"`` (counters, histograms, and gauges of counts; gauges of fractions, whose names
say ``usage``, ``perc``, ``rate`` or ``ratio``, are averaged).  A replica that did not answer
the scrape is left out, and ``loom_replica_up{replica}`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

_FRACTION_WORDS = ("usage", "perc", "rate", "ratio")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(float(value))


def merge_replica_metrics(texts: Sequence[str | None], router: Any, routed: Mapping[tuple[int, str], int],
                          failovers: int) -> str:
    """The ingress's exposition text (see the module docstring).

    Args:
        texts: each replica's ``/metrics`` text, ``None`` for one that did not answer.
        router: the ``CacheAwareRouter`` (its state sizes and health).
        routed: requests sent per (replica, reason).
        failovers: requests re-sent to another replica after one failed.
    """
    families: dict[str, dict[str, Any]] = {}
    for replica, text in enumerate(texts):
        if text is None:
            continue
        for fam in text_string_to_metric_families(text):
            entry = families.setdefault(fam.name, {"type": fam.type, "help": fam.documentation, "samples": []})
            for sample in fam.samples:
                entry["samples"].append((sample.name, dict(sample.labels), sample.value, replica))
    lines: list[str] = []
    for name, merged in families.items():
        merged["samples"] = [s for s in merged["samples"] if not s[0].endswith("_created")]  # timestamps: not summable
        shown = f"{name}_total" if merged["type"] == "counter" else name  # as prometheus_client writes it
        lines.append(f"# HELP {shown} {merged['help']}")
        lines.append(f"# TYPE {shown} {merged['type']}")
        totals: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
        for sample_name, labels, value, replica in merged["samples"]:
            lines.append(f"{sample_name}{_labels({**labels, 'replica': str(replica)})} {_number(value)}")
            totals.setdefault((sample_name, tuple(sorted(labels.items()))), []).append(value)
        average = merged["type"] == "gauge" and any(w in name for w in _FRACTION_WORDS)
        for (sample_name, labels_t), values in totals.items():
            value = sum(values) / len(values) if average else sum(values)
            lines.append(f"{sample_name}{_labels({**dict(labels_t), 'replica': 'all'})} {_number(value)}")
    stats = router.stats()
    lines += ["# HELP loom_replica_up 1 while the router sends the replica requests.",
              "# TYPE loom_replica_up gauge"]
    for replica, healthy in enumerate(stats["healthy"]):
        lines.append(f'loom_replica_up{{replica="{replica}"}} {1.0 if healthy and texts[replica] else 0.0}')
    lines += ["# HELP loom_router_requests_total Requests routed, by replica and reason.",
              "# TYPE loom_router_requests_total counter"]
    for (replica, reason), count in sorted(routed.items()):
        lines.append(f'loom_router_requests_total{{replica="{replica}",reason="{reason}"}} {float(count)}')
    lines += ["# HELP loom_router_failovers_total Requests re-sent after their replica failed.",
              "# TYPE loom_router_failovers_total counter", f"loom_router_failovers_total {float(failovers)}",
              "# HELP loom_router_prefix_blocks Prefix-index entries (chained block hashes).",
              "# TYPE loom_router_prefix_blocks gauge", f"loom_router_prefix_blocks {float(stats['prefix_blocks'])}",
              "# HELP loom_router_sessions Sessions pinned to a replica.",
              "# TYPE loom_router_sessions gauge", f"loom_router_sessions {float(stats['sessions'])}"]
    return "\n".join(lines) + "\n"
