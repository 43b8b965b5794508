"""Loom evals: cost and latency per token class, with reports and side-by-side comparisons.

``evals.run(suite=..., ...)`` (or ``loom eval run``) runs a suite
(``throughput``, ``prefix``, ``sessions``, ``rag``, ``spec``; answer quality:
``qa`` and ``tools``) against the
in-process engine or an OpenAI-compatible HTTP server, once per variant
(``compare``) and optionally through HF transformers (``baseline="hf"``), and
writes per-request records (JSONL), summaries (JSON) and an HTML report.
Metric formulas live in :mod:`loom.evals.metrics` (vLLM's benchmark definitions).

The sessions benchmark behind ``loom bench sessions`` is :mod:`loom.evals.bench_sessions`;
the command line itself (``loom eval``, ``loom demo``, ``loom chat``) is :mod:`loom.cli`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run", "EvalResult"]


def run(*args: Any, **kwargs: Any) -> Any:
    """See :func:`loom.evals.harness.run`."""
    from loom.evals.harness import run as _run

    return _run(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "EvalResult":
        from loom.evals.harness import EvalResult

        return EvalResult
    raise AttributeError(f"module 'evals' has no attribute {name!r}")
