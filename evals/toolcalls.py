"""The ``tools`` suite's tools, prompts and scoring: right tool, valid arguments, unforced.

Each prompt of ``evals/data/tool_prompts.json`` names the tool a good
assistant calls for it (``expected_tool``; ``null`` for prompts that need no
tool) and checks on the arguments, per argument one of:

* ``{"equals": X}``: numbers within a relative 1e-6, strings case-insensitively equal;
* ``{"one_of": [...]}``: case-insensitively equal to one of the strings;
* ``{"contains": [...]}``: the string contains one of them (case-insensitive);
* ``{"evaluates_to": X}``: a calculator expression whose value is X (within 1e-6 relative),
  evaluated by ``loom.tools.builtin.evaluate`` (so ``1234*5678`` and ``5678 * 1234`` both pass).

A call is *schema-valid* when its arguments validate against the tool's JSON
schema (``jsonschema``, the same schema the model was shown), and its
arguments *match* when every check passes.  Only the first call of the reply
is scored (the agent runs one model call per prompt).  The tools are
deterministic stand-ins: what matters is the call, not the weather.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from loom.json_types import JSONObject
from loom.tools import tool
from loom.tools.base import ToolError

DATA_FILE = Path(__file__).parent / "data" / "tool_prompts.json"

TOOLS_SYSTEM_PROMPT = "You are a helpful assistant. Call a tool when it helps to answer; otherwise answer directly."

# Factors to a base unit per dimension (metre, kilogram); temperatures are converted by formula.
_LENGTH = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "mi": 1609.344, "ft": 0.3048, "in": 0.0254,
           "yd": 0.9144}
_MASS = {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125}
_ALIASES = {"kilometer": "km", "kilometers": "km", "kilometre": "km", "kilometres": "km", "meter": "m",
            "meters": "m", "metre": "m", "metres": "m", "mile": "mi", "miles": "mi", "feet": "ft", "foot": "ft",
            "inch": "in", "inches": "in", "kilogram": "kg", "kilograms": "kg", "gram": "g", "grams": "g",
            "pound": "lb", "pounds": "lb", "lbs": "lb", "ounce": "oz", "ounces": "oz", "celsius": "c",
            "°c": "c", "fahrenheit": "f", "°f": "f", "kelvin": "k"}


def _unit(name: str) -> str:
    key = name.strip().lower()
    return _ALIASES.get(key, key)


@tool
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Current weather for a city.

    Args:
        city: city name, e.g. "Paris".
        unit: temperature unit.
    """
    temp = "18 degrees Celsius" if unit == "celsius" else "64 degrees Fahrenheit"
    return f"{city}: {temp}, light rain"


@tool
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity between units of length, mass or temperature.

    Args:
        value: the number to convert.
        from_unit: the unit of value, e.g. "km", "mi", "kg", "lb", "C", "F".
        to_unit: the unit to convert to.
    """
    src, dst = _unit(from_unit), _unit(to_unit)
    temps = {"c": lambda v: v, "f": lambda v: (v - 32) * 5 / 9, "k": lambda v: v - 273.15}
    back = {"c": lambda v: v, "f": lambda v: v * 9 / 5 + 32, "k": lambda v: v + 273.15}
    if src in temps and dst in back:
        return f"{back[dst](temps[src](value)):.6g} {to_unit}"
    for table in (_LENGTH, _MASS):
        if src in table and dst in table:
            return f"{value * table[src] / table[dst]:.6g} {to_unit}"
    raise ToolError(f"cannot convert {from_unit!r} to {to_unit!r}")


@tool
def get_time(timezone: str) -> str:
    """Current local time in a time zone.

    Args:
        timezone: IANA time zone name, e.g. "Europe/Paris" or "Asia/Tokyo".
    """
    return f"It is 14:30 in {timezone}."


def eval_tools() -> list[Any]:
    """The suite's tools: ``calculator`` (``loom.tools.builtin``), ``get_weather``, ``convert_units``, ``get_time``."""
    from loom.tools.builtin import calculator

    return [calculator, get_weather, convert_units, get_time]


@dataclass(frozen=True)
class ToolCase:
    """One prompt, the tool it calls for (``None``: no tool) and checks per argument."""

    id: str
    prompt: str
    expected_tool: str | None
    arguments: dict[str, JSONObject] = field(default_factory=dict)


@lru_cache(maxsize=4)
def load_cases(path: str | Path = DATA_FILE) -> tuple[ToolCase, ...]:
    """The prompts in file order.

    Raises:
        ValueError: a malformed entry, a duplicate id or an unknown check kind, naming it.
    """
    out: list[ToolCase] = []
    for i, item in enumerate(json.loads(Path(path).read_text())):
        try:
            case = ToolCase(item["id"], item["prompt"], item["expected_tool"], dict(item.get("arguments") or {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: entry {i} is malformed ({exc!r})") from None
        if any(c.id == case.id for c in out):
            raise ValueError(f"{path}: duplicate case id {case.id!r}")
        for arg, check in case.arguments.items():
            if len(check) != 1 or next(iter(check)) not in CHECKS:
                raise ValueError(f"{path}: case {case.id!r} argument {arg!r}: one of {sorted(CHECKS)} expected")
        out.append(case)
    return tuple(out)


def _close(a: Any, b: Any) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, rel_tol=1e-6)


def _evaluates_to(value: Any, want: float) -> bool:
    from loom.tools.builtin import evaluate

    try:
        return isinstance(value, str) and _close(evaluate(value), want)
    except ToolError:
        return False


CHECKS = {
    "equals": lambda v, want: _close(v, want) if isinstance(want, (int, float))
    else isinstance(v, str) and v.strip().lower() == str(want).lower(),
    "one_of": lambda v, want: isinstance(v, str) and v.strip().lower() in {w.lower() for w in want},
    "contains": lambda v, want: isinstance(v, str) and any(w.lower() in v.lower() for w in want),
    "evaluates_to": _evaluates_to,
}


def check_arguments(arguments: JSONObject, checks: dict[str, JSONObject]) -> bool:
    """Whether every argument check passes (a missing argument fails its check)."""
    return all(name in arguments and CHECKS[kind](arguments[name], want)
               for name, check in checks.items() for kind, want in check.items())


def schema_valid(arguments: Any, schema: JSONObject) -> bool:
    """Whether ``arguments`` validate against the JSON schema ``schema`` (``jsonschema``)."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema).is_valid(arguments)


@dataclass(frozen=True)
class CallScore:
    """What the model did with one prompt.

    Attributes:
        called: name of the first tool called (``None``: answered without a call; ``""``: a call
            whose name could not be parsed).
        num_calls: calls in the reply.
        malformed: the first call could not be parsed (no usable arguments).
        picked_right: the first call names the expected tool (for no-tool prompts: no call).
        schema_valid: the first call's arguments validate against its tool's schema.
        args_match: ``picked_right`` and ``schema_valid`` and every argument check passes.
    """

    called: str | None
    num_calls: int
    malformed: bool
    picked_right: bool
    schema_valid: bool
    args_match: bool


def score_calls(case: ToolCase, calls: list[tuple[str, JSONObject, str | None]],
                schemas: dict[str, JSONObject]) -> CallScore:
    """Score the calls ``(name, arguments, parse_error)`` a reply made for ``case``.

    ``schemas``: tool name -> JSON schema of its parameters.
    """
    if not calls:
        right = case.expected_tool is None
        return CallScore(None, 0, False, right, False, right)
    name, args, error = calls[0]
    malformed = error is not None
    valid = not malformed and name in schemas and schema_valid(args, schemas[name])
    right = name == case.expected_tool
    match = right and valid and check_arguments(args, case.arguments)
    return CallScore(name or "", len(calls), malformed, right, valid, match)


def tools_quality(records: list[JSONObject]) -> JSONObject:
    """Rates over a variant's records: over prompts that call for a tool, how often the model
    picked it, with schema-valid and with matching arguments; how often the first call was
    malformed, named another tool, or there was no call (these three and ``pick_rate`` add up
    to 1 when no malformed call names the right tool); over prompts that need none, how often
    it correctly called none.  Rates in [0, 1]."""
    tool_recs = [r for r in records if r.get("expected_tool")]
    none_recs = [r for r in records if r.get("expected_tool") is None]
    n = len(tool_recs)

    def rate(pred: Any, recs: list[JSONObject]) -> float | None:
        return sum(1 for r in recs if pred(r)) / len(recs) if recs else None

    by_tool: dict[str, dict[str, float | int | None]] = {}
    for name in sorted({r["expected_tool"] for r in tool_recs}):
        recs = [r for r in tool_recs if r["expected_tool"] == name]
        by_tool[name] = {"prompts": len(recs), "pick_rate": rate(lambda r: r["picked_right"], recs),
                         "valid_args_rate": rate(lambda r: r["args_match"], recs)}
    return {"tool_prompts": n, "no_tool_prompts": len(none_recs),
            "pick_rate": rate(lambda r: r["picked_right"], tool_recs),
            "schema_valid_rate": rate(lambda r: r["picked_right"] and r["schema_valid"], tool_recs),
            "valid_args_rate": rate(lambda r: r["args_match"], tool_recs),
            "wrong_tool_rate": rate(lambda r: r["num_calls"] and not r["malformed"] and not r["picked_right"],
                                    tool_recs),
            "malformed_rate": rate(lambda r: r["malformed"], tool_recs),
            "no_call_rate": rate(lambda r: not r["num_calls"], tool_recs),
            "no_tool_abstain_rate": rate(lambda r: not r["num_calls"], none_recs),
            "failed": sum(not r["ok"] for r in records),
            "by_tool": by_tool}
