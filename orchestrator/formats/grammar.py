"""The forced tool call as a grammar, written in the model's own call format.

``tool_choice="required"`` or a named tool constrains decoding (llguidance,
Lark dialect) to exactly one call spelled as ``fmt.render_call`` spells it:
the open marker (a token reference by id, ``<[151657]>``, when it is one
special token, since llguidance does not match added tokens from plain text;
a quoted string otherwise), the JSON of ``{"name", <arguments key>}`` over the
tools' schemas (``loom.runtime.structured_output.tool_call_schema``) with no free
whitespace and the separators ``json.dumps`` / Jinja's ``tojson`` write, then
the close marker. After the grammar completes only end-of-sequence is allowed,
so the reply is the call and nothing else.

``bound=True`` (the agent's choice; an API must not change a user's schema)
also makes unbounded scalars finite and closes objects that declare their
properties (``additionalProperties: false`` unless the schema says otherwise, as
llama.cpp's JSON-schema grammars do), so a weak model cannot write digits,
characters or invented keys until its budget ends and the call never closes.

:func:`force_call` is the one place a forced call's ``SamplingParams`` are
made (the agent loop, ``LoomChatModel`` and ``/v1/chat/completions`` all call
it).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from loom.json_types import JSONObject
from loom.orchestrator.formats.format import ToolCallFormat

if TYPE_CHECKING:
    from loom.runtime.sampling_params import SamplingParams

FORCED_INT_BOUND = 10**9
FORCED_STRING_MAX = 128
FORCED_ARRAY_MAX = 16
# A forced call of the agent gets at least this many output tokens: room for the markers, the name
# and two string arguments at their bound (FORCED_STRING_MAX characters).
FORCED_MIN_TOKENS = 320

# llguidance JSON options: no free whitespace (a weak model would pad its budget with it)
# and the separators json.dumps / tojson write, so a call reads back byte-identical.
COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def bound_schema(schema: Any) -> Any:
    """Copy of a JSON schema whose unbounded scalars are made finite.

    Integers without bounds get ``[-1e9, 1e9]`` (numbers keep none: llguidance's
    grammar of a bounded number has no exponent, and models write ``8.854e-12``
    for small constants; bounded, Qwen2.5-Coder wrote ``8.854000000000001``); strings without
    ``maxLength`` / ``enum`` / ``const`` / ``pattern`` / ``format`` get
    ``maxLength=128`` and, unless they set one, ``minLength=1``; arrays without
    ``maxItems`` get ``maxItems=16``; an object with
    ``properties`` and no ``additionalProperties`` gets ``additionalProperties:
    false`` (a tool without parameters takes ``{}`` only; a bare ``{"type":
    "object"}``, a free-form mapping, stays open).
    """
    if isinstance(schema, list):
        return [bound_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bound_schema(v) for k, v in schema.items()}
    kind = out.get("type")
    if kind == "integer":  # numbers stay open: llguidance's range grammar has no exponent (8.854e-12, 1e-09)
        if not any(k in out for k in ("minimum", "exclusiveMinimum", "enum", "const")):
            out["minimum"] = -FORCED_INT_BOUND
        if not any(k in out for k in ("maximum", "exclusiveMaximum", "enum", "const")):
            out["maximum"] = FORCED_INT_BOUND
    if kind == "string" and not any(k in out for k in ("maxLength", "enum", "const", "pattern", "format")):
        out["maxLength"] = FORCED_STRING_MAX
        out.setdefault("minLength", 1)  # a forced call's empty string argument is never what was meant
    if kind == "array" and not any(k in out for k in ("maxItems", "prefixItems")):
        out["maxItems"] = FORCED_ARRAY_MAX  # SmolLM2 appended list items until its budget ended
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False  # an undeclared argument never reaches a tool as meant
    return out


def compact(schema: JSONObject) -> JSONObject:
    """``schema`` with Loom's compact-JSON llguidance options (unless it sets its own)."""
    return schema if "x-guidance" in schema else {**schema, "x-guidance": COMPACT_JSON}


def _marker(text: str, token_id: int | None) -> str:
    # llguidance: <[ID]> is one token by id; a quoted string is spelled from ordinary tokens
    return f"<[{token_id}]>" if token_id is not None else json.dumps(text)


def forced_call_grammar(fmt: ToolCallFormat, tools: list[JSONObject], name: str | None = None,
                        bound: bool = False, parallel: bool = False) -> str:
    """Lark grammar (llguidance) of exactly one call in ``fmt`` (one or more with ``parallel``).

    Args:
        fmt: the model's format.
        tools: OpenAI-style tool dicts.
        name: only this tool may be called (``None``: any of ``tools``).
        bound: make unbounded scalars finite (:func:`bound_schema`).
        parallel: allow several calls in one reply (OpenAI's ``parallel_tool_calls``):
            one JSON list of calls in array formats (Mistral ``[TOOL_CALLS][...]``),
            blocks separated by a newline in formats with a closing marker (Hermes /
            default ``<tool_call>...</tool_call>``); formats with neither (Llama 3
            JSON: one bare object per reply) stay at one call.

    Raises:
        ValueError: no tools, a malformed tool, or ``name`` not among them.
    """
    from loom.runtime.structured_output import tool_call_schema

    schema = tool_call_schema(tools, name, arguments_key=fmt.arguments_key)
    schema = compact(bound_schema(schema) if bound else schema)
    body = "call"
    if fmt.array:
        body = '"[" call ("," call)* "]"' if parallel else '"[" call "]"'
    parts: list[str] = []
    if not fmt.open_in_body:
        parts.append(_marker(fmt.call_open, fmt.open_token_id))
        if fmt.separator:
            parts.append(json.dumps(fmt.separator))
    parts.append(body)
    if fmt.call_close is not None:
        if fmt.separator:
            parts.append(json.dumps(fmt.separator))
        parts.append(_marker(fmt.call_close, fmt.close_token_id))
    block = " ".join(parts)
    if parallel and fmt.call_close is not None and not fmt.array:
        # a newline may follow the last block too: these formats' templates join calls with one,
        # so a model picks it before deciding whether another call comes (then it may stop)
        return f"start: block (\"\\n\" block)* \"\\n\"?\nblock: {block}\ncall: %json {json.dumps(schema)}"
    return f"start: {block}\ncall: %json {json.dumps(schema)}"


def force_call(params: SamplingParams, fmt: ToolCallFormat, tools: list[JSONObject],
               name: str | None = None, bound: bool = False, min_tokens: int = 0,
               parallel: bool = False) -> SamplingParams:
    """``params`` constrained to exactly one call of ``fmt`` (one or more with ``parallel``;
    :func:`forced_call_grammar`).

    Stop strings are dropped (one inside the arguments would cut the call
    short); ``max_tokens`` is raised to ``min_tokens`` when below it (the agent
    passes :data:`FORCED_MIN_TOKENS`; an API keeps the caller's budget).

    Raises:
        ValueError: as :func:`forced_call_grammar`.
    """
    from loom.runtime.structured_output import StructuredOutputParams

    grammar = forced_call_grammar(fmt, tools, name, bound=bound, parallel=parallel)
    return params.clone(structured_output=StructuredOutputParams(grammar=grammar), stop=[],
                        max_tokens=max(params.max_tokens, min_tokens))
