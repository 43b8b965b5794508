"""JSON schema of a forced tool call, for constrained decoding.

A forced tool call is the JSON inside a ``<tool_call>`` block (Hermes / Qwen3
convention): ``{"name": <tool name>, "arguments": {...}}``.  The schema is an
``anyOf`` over the tools, each branch fixing ``name`` with ``const`` and taking
the tool's ``parameters`` schema for ``arguments``, so the grammar engine lets
the model pick a tool and then only write arguments valid for that tool.

A tool's parameters may refer to their own definitions (``$defs`` /
``definitions`` and ``$ref``, as Pydantic and ``openai.pydantic_function_tool``
write them); those pointers start at the parameters' root, which is no longer
the schema's root, so such parameters move into the root's ``$defs`` (named
``tool<i>``, their definitions ``tool<i>_<name>``) with every local ``$ref``
rewritten to match.

Arguments carry only the properties a tool declares: an object schema that
says nothing of ``additionalProperties`` gets ``false`` in the grammar (as
vLLM's default grammar backend, XGrammar, treats it, and as OpenAI's strict
function calling requires), so a small model cannot pad a call with invented
keys (SmolLM2 wrote ``{"city": "Oslo", "properties": {...}, "required": [...]}``
for a one-argument tool).  A schema that allows extra properties keeps them.
What the grammar admits is always valid against the tool's own schema.
"""

from __future__ import annotations

import copy

from loom.json_types import JSONObject


def _function(tool: JSONObject) -> JSONObject:
    fn = tool.get("function", tool) if tool.get("type", "function") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(
            "tools: each tool must be {'type': 'function', 'function': {'name': ..., "
            f"'parameters': {{...}}}}, got {tool!r}"
        )
    return fn


_DEFINITIONS = ("$defs", "definitions")


def _branch(fn: JSONObject, index: int, defs: JSONObject, arguments_key: str = "arguments") -> JSONObject:
    params = copy.deepcopy(fn.get("parameters") or {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        raise ValueError(f"tools: parameters of {fn['name']!r} must be a JSON schema object")
    _close_objects(params)
    if _has_refs(params):  # its "#..." pointers would now start at the wrapper: move it under the root's $defs
        prefix = f"tool{index}"
        for key in _DEFINITIONS:
            for def_name, definition in (params.pop(key, None) or {}).items():
                defs[f"{prefix}_{def_name}"] = _rebase(definition, prefix)
        defs[prefix] = _rebase(params, prefix)
        params = {"$ref": f"#/$defs/{prefix}"}
    return {
        "type": "object",
        "properties": {"name": {"const": fn["name"]}, arguments_key: params},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def _close_objects(schema: object) -> None:
    """In place: every object schema in ``schema`` (walked by keyword, never into a ``properties`` mapping's
    names) that declares ``properties`` and says nothing of extra ones gets ``additionalProperties: false``."""
    if not isinstance(schema, dict):
        return
    if "properties" in schema and "additionalProperties" not in schema and "patternProperties" not in schema:
        schema["additionalProperties"] = False
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                _close_objects(sub)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                _close_objects(sub)
    for key in _SUBSCHEMAS:
        _close_objects(schema.get(key))


def _has_refs(schema: object) -> bool:
    if isinstance(schema, dict):
        return any(k == "$ref" or k in _DEFINITIONS or _has_refs(v) for k, v in schema.items())
    return isinstance(schema, list) and any(_has_refs(v) for v in schema)


def _rebase(schema: object, prefix: str) -> object:
    """``schema`` with every local ``$ref`` rewritten for its new place: ``#/$defs/X`` (or ``#/definitions/X``)
    -> ``#/$defs/<prefix>_X``, any other ``#...`` (the parameters' own root) -> ``#/$defs/<prefix>...``."""
    if isinstance(schema, list):
        return [_rebase(v, prefix) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _rebase(v, prefix) for k, v in schema.items() if k != "$ref"}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        for key in _DEFINITIONS:
            if ref.startswith(f"#/{key}/"):
                ref = f"#/$defs/{prefix}_{ref[len(key) + 3:]}"
                break
        else:
            ref = f"#/$defs/{prefix}{ref[1:]}"
    if ref is not None:
        out["$ref"] = ref
    return out


def tool_call_schema(tools: list[JSONObject], name: str | None = None,
                     arguments_key: str = "arguments") -> JSONObject:
    """JSON schema for ``{"name": ..., "arguments": {...}}`` over OpenAI-style tools.

    Args:
        tools: ``[{"type": "function", "function": {"name", "description",
            "parameters"}}]`` (a bare ``{"name", "parameters"}`` dict is accepted too).
        name: when given, only this tool may be called (OpenAI
            ``tool_choice={"type": "function", "function": {"name": ...}}``).
        arguments_key: key of the arguments object (``"parameters"`` for Llama 3.1 JSON calls).

    Returns:
        A JSON schema dict: one object branch per tool, or their ``anyOf``.

    Raises:
        ValueError: no tools, a malformed tool, or ``name`` not among the tools.
    """
    if not tools:
        raise ValueError("tools: a forced tool call needs at least one tool")
    fns = [_function(t) for t in tools]
    if name is not None:
        fns = [f for f in fns if f["name"] == name]
        if not fns:
            raise ValueError(f"tool_choice: no tool named {name!r}")
    defs: JSONObject = {}
    branches = [_branch(f, i, defs, arguments_key) for i, f in enumerate(fns)]
    schema: JSONObject = branches[0] if len(branches) == 1 else {"anyOf": branches}
    if defs:
        schema["$defs"] = defs
    return schema
