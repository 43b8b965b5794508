"""JSON schema of a Python function's parameters, from its type hints and docstring.

Design: the signature becomes a pydantic model (``pydantic.create_model``) with
one field per parameter, so pydantic both *describes* the arguments (JSON
schema) and *validates* them (lax mode: ``"3"`` is accepted for an ``int``).
Parameter descriptions come from the docstring's ``Args:`` section (Google,
reST or numpydoc, parsed by ``docstring_parser``); defaults make a parameter
optional.  The model forbids unknown keys, so a misspelt argument is reported
to the model instead of silently dropped.

The raw pydantic schema is then made model-friendly and stable:
non-recursive ``$ref``s are inlined (small models follow flat schemas better),
``title`` keywords are dropped (noise in the prompt), and keys are sorted
(:func:`loom.tools.base.canonicalize`) so a schema always renders to the same bytes.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, create_model

from loom.json_types import JSONObject
from loom.tools.base import canonicalize

__all__ = ["ArgsModel", "clean_schema", "describe_function", "args_model_from_signature"]

# Keywords whose value maps names to sub-schemas (not keywords themselves).
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
# Keywords whose value is data, not a schema: left exactly as they are.
_DATA_KEYWORDS = ("default", "enum", "const", "examples")


class ArgsModel(BaseModel):
    """Base of the generated argument models: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")


def describe_function(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Split ``fn``'s docstring into (description, {parameter: description}).

    The description is the summary plus the long description, without the
    ``Args``/``Returns``/``Raises`` sections; hard-wrapped lines are joined
    (wrapping is source formatting, not content), list items keep their lines.
    """
    doc = inspect.getdoc(fn) or ""
    parsed = docstring_parser.parse(doc)
    parts = [_unwrap(p) for p in (parsed.short_description, parsed.long_description) if p]
    params = {p.arg_name: " ".join(p.description.split()) for p in parsed.params if p.description}
    return "\n\n".join(parts), params


_LIST_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s")


def _unwrap(text: str) -> str:
    """Join hard-wrapped lines within paragraphs; keep blank lines and list items."""
    paragraphs = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines: list[str] = []
        for line in (ln.strip() for ln in para.splitlines()):
            if lines and not _LIST_ITEM.match(line):
                lines[-1] = f"{lines[-1]} {line}"
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def args_model_from_signature(
    fn: Callable[..., Any], param_docs: dict[str, str], model_name: str
) -> tuple[type[BaseModel], dict[str, str]]:
    """Build the pydantic model of ``fn``'s keyword arguments.

    Returns the model and a map from the model's internal field names to the
    parameter names (fields are aliased, so parameters such as ``json`` or
    ``model_config`` cannot clash with ``BaseModel`` attributes).

    Raises:
        TypeError: ``*args``/``**kwargs`` parameters, or type hints that cannot
            be resolved.
    """
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError for unresolvable forward references
        raise TypeError(f"cannot resolve the type hints of {fn!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    for i, (pname, param) in enumerate(inspect.signature(fn).parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool functions cannot take *args or **kwargs ({fn!r}: {pname})")
        default = ... if param.default is param.empty else param.default
        field = (Field(default, alias=pname, description=param_docs[pname]) if pname in param_docs
                 else Field(default, alias=pname))
        internal = f"arg{i}"
        fields[internal] = (hints.get(pname, Any), field)
        names[internal] = pname
    model = create_model(model_name, __base__=ArgsModel, **fields)
    return model, names


def clean_schema(schema: JSONObject) -> JSONObject:
    """Make a schema self-contained, title-free and canonically ordered.

    Every local ``$ref`` is inlined, so the schema still means the same once it
    is nested inside another one (e.g. as ``arguments`` of a forced tool-call
    schema, where a root ``#/$defs/...`` pointer would dangle).  A recursive
    model is unrolled once; deeper levels keep only the referenced type (e.g.
    ``{"type": "object"}``) in the schema, and pydantic still validates them
    fully.
    """
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    inlined = _inline(schema, defs, ())
    inlined.pop("$defs", None)
    inlined.pop("definitions", None)
    return canonicalize(_drop_titles(inlined))


def _inline(node: Any, defs: JSONObject, stack: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(v, defs, stack) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    key = _local_def(ref)
    if key is not None and key in defs:
        siblings = {k: _inline(v, defs, stack) for k, v in node.items() if k != "$ref"}
        if key in stack:  # recursion: stop here with the bare type
            target = {"type": defs[key]["type"]} if "type" in defs[key] else {}
        else:
            target = _inline(defs[key], defs, (*stack, key))
        return {**target, **siblings}
    return {k: _inline(v, defs, stack) for k, v in node.items()}


def _local_def(ref: Any) -> str | None:
    if isinstance(ref, str):
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                return ref.removeprefix(prefix)
    return None


def _drop_titles(node: Any) -> Any:
    if isinstance(node, list):
        return [_drop_titles(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: JSONObject = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA_KEYWORDS:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _drop_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _drop_titles(value)
    return out
