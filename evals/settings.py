"""Variant settings: ``KEY=VALUE`` strings to engine, speculation and budget settings.

A variant is a dict of settings applied on top of the run's engine settings:

* any ``runtime.EngineConfig`` field (``enable_prefix_caching=false``,
  ``max_num_seqs=4``, ``max_num_batched_tokens=512``, ``block_size=32`` ...);
* ``speculative=off|ngram|draft_model``, ``num_speculative_tokens=K``,
  ``draft_model=PATH``, ``prompt_lookup_max=N`` (``loom.runtime.spec_decode.SpeculativeConfig``);
* ``budget.FIELD=VALUE`` for the agent's ``orchestrator.ContextBudget`` (``rag``, ``qa``,
  ``tools``), e.g. ``budget.max_retrieval_tokens=256``;
* ``retrieval=on|off`` (``qa``): whether the agent retrieves before answering;
* ``similarity_cutoff=null|auto|X`` (``qa``): the agent's relevance cutoff
  (``orchestrator.relevance``; default ``auto``, the embedder's measured one; ``null``: none);
* ``no_match_answer=null|TEXT`` (``qa``): the answer when nothing retrieved is related, with no
  model call (default ``orchestrator.relevance.NOT_FOUND_ANSWER``; ``null``: the model answers).
* ``first_answer_k=K|null`` (``qa``): the agent's ``first_answer_k``, the top hits its first answer is
  made from before it answers from all of them (default 1; ``null``: all from the start);
* ``attribution_k=K|null`` (``qa``): the agent's ``attribution_k``, the hits of the search for sections
  that state what a rejected answer names (``orchestrator.answer_check``; default 8; ``null``: none);
* ``verifier=MODEL`` and ``verifier_threshold=X`` (``qa``): the agent's answer verifier, a second
  model that judges each answer the lexical check let through (``orchestrator.answer_verifier``;
  default none; threshold in nats, default 0).

Values parse as JSON where they can (``false``, ``4``, ``0.5``, ``null``),
else stay strings.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from loom.json_types import JSONObject

SPEC_KEYS = {"speculative", "num_speculative_tokens", "draft_model", "prompt_lookup_min", "prompt_lookup_max",
             "disable_by_batch_size"}
#: Settings the suite's target reads itself (neither engine nor budget).
SUITE_KEYS = {"retrieval", "similarity_cutoff", "no_match_answer", "first_answer_k", "verifier", "verifier_threshold",
              "attribution_k"}


def parse_value(text: str) -> Any:
    """``"false"`` -> False, ``"4"`` -> 4, ``"null"`` -> None, anything else stays a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        return text


def parse_variant(spec: str) -> JSONObject:
    """``"a=1,b=false"`` -> ``{"a": 1, "b": False}``.

    Raises:
        ValueError: a part without ``=`` (naming it).
    """
    out: JSONObject = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if "=" not in part:
            raise ValueError(f"compare: expected KEY=VALUE, got {part!r}")
        key, value = part.split("=", 1)
        out[key.strip()] = parse_value(value.strip())
    return out


def variant_name(settings: JSONObject) -> str:
    """Readable, file-safe variant name (``base`` for no settings)."""
    if not settings:
        return "base"
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items())


def split_settings(settings: JSONObject) -> tuple[JSONObject, JSONObject]:
    """(``EngineConfig`` keyword arguments, ``ContextBudget`` fields) of a variant
    (:data:`SUITE_KEYS` are left to the target).

    Raises:
        ValueError: an unknown key, naming it and the known ones.
    """
    from loom.runtime import EngineConfig

    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)} - {"model"}
    engine: JSONObject = {}
    budget: JSONObject = {}
    spec: JSONObject = {}
    for key, value in settings.items():
        if key.startswith("budget."):
            budget[key[len("budget."):]] = value
        elif key in SPEC_KEYS:
            spec[key] = value
        elif key in engine_fields:
            engine[key] = value
        elif key in SUITE_KEYS:
            continue
        else:
            raise ValueError(f"compare: unknown setting {key!r}; use an EngineConfig field "
                             f"({', '.join(sorted(engine_fields))}), one of {sorted(SPEC_KEYS | SUITE_KEYS)} "
                             "or budget.FIELD")
    if spec:
        engine["speculative_config"] = speculative_config(spec)
    return engine, budget


def speculative_config(spec: JSONObject) -> Any:
    """``loom.runtime.spec_decode.SpeculativeConfig`` from ``speculative=...`` keys (``None`` for ``off``)."""
    method = spec.pop("speculative", "ngram")
    if method in (None, False, "off", "none"):
        return None
    from loom.runtime.spec_decode import SpeculativeConfig

    return SpeculativeConfig(method=method, **spec)
