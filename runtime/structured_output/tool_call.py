"""JSON schema of a forced tool call, for constrained decoding.

A forced tool call is the JSON inside a ``<tool_call>`` block (Hermes / Qwen3
convention): ``{"name": <tool name>, "arguments": {...}}``.  The schema is an
``anyOf`` over the tools, each branch fixing ``name`` with ``const`` and taking
the tool's ``parameters`` schema for ``arguments``, so the grammar engine lets
the model pick a tool and then only write arguments valid for that tool.
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


def _branch(fn: JSONObject, arguments_key: str = "arguments") -> JSONObject:
    params = copy.deepcopy(fn.get("parameters") or {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        raise ValueError(f"tools: parameters of {fn['name']!r} must be a JSON schema object")
    return {
        "type": "object",
        "properties": {"name": {"const": fn["name"]}, arguments_key: params},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


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
    branches = [_branch(f, arguments_key) for f in fns]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}
