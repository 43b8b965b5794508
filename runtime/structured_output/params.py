"""What a request asks the grammar engine for: ``StructuredOutputParams``.

One of ``json`` (a JSON schema, as a dict or a JSON string), ``regex``,
``grammar`` (a Lark grammar in llguidance's dialect) or ``json_object=True``
(any JSON object) is set.  The same names as vLLM's ``StructuredOutputsParams``
/ ``GuidedDecodingParams``.  ``key()`` gives a canonical string used as the
compiled-grammar cache key, so two requests with the same schema (even written
with different key order) compile once.
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass

from loom.json_types import JSONObject


@dataclass(frozen=True)
class StructuredOutputParams:
    """Constraint on a request's output.

    Attributes:
        json: JSON schema (dict or JSON string); output is one JSON value that
            validates against it.
        regex: regular expression (Rust ``regex`` syntax, as llguidance takes it)
            the whole output must match.
        grammar: Lark grammar (llguidance dialect, ``start`` rule) for the output.
        json_object: any JSON object (OpenAI ``response_format={"type": "json_object"}``).

    Raises:
        ValueError: when zero or more than one of the four is set, or a field has
            the wrong type (the message names the field).
    """

    json: JSONObject | str | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False

    def __post_init__(self) -> None:
        chosen = [n for n in ("json", "regex", "grammar") if getattr(self, n) is not None]
        if self.json_object:
            chosen.append("json_object")
        if len(chosen) != 1:
            raise ValueError(
                "structured_output: exactly one of json, regex, grammar, json_object "
                f"must be set, got {chosen or 'none'}"
            )
        if self.json is not None and not isinstance(self.json, (dict, str)):
            raise ValueError("structured_output.json must be a schema dict or a JSON string")
        if self.json is not None and isinstance(self.json, str):
            try:
                parsed = _json.loads(self.json)
            except _json.JSONDecodeError as exc:
                raise ValueError(f"structured_output.json is not valid JSON: {exc}") from exc
            if not isinstance(parsed, (dict, bool)):
                raise ValueError("structured_output.json must be a JSON object (a schema)")
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"structured_output.{name} must be a string")

    @property
    def kind(self) -> str:
        """``"json" | "regex" | "grammar" | "json_object"``."""
        if self.json is not None:
            return "json"
        if self.regex is not None:
            return "regex"
        if self.grammar is not None:
            return "grammar"
        return "json_object"

    def key(self) -> str:
        """Canonical cache key: kind plus the spec (schemas with sorted keys)."""
        if self.json is not None:
            schema = _json.loads(self.json) if isinstance(self.json, str) else self.json
            return "json:" + _json.dumps(schema, sort_keys=True, separators=(",", ":"))
        if self.regex is not None:
            return "regex:" + self.regex
        if self.grammar is not None:
            return "grammar:" + self.grammar
        return "json_object:"

    def __hash__(self) -> int:  # dict schemas are unhashable; hash the canonical key
        return hash(self.key())
