"""Schema derivation: exact JSON schemas from type hints and docstrings."""

import enum
import json
from typing import Annotated, Literal, Optional

import llguidance
import pytest
from pydantic import BaseModel, Field

from loom.tools import ToolArgumentsError, tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    """A point on the plane."""

    x: int = Field(description="abscissa")
    y: int = 0


class Tree(BaseModel):
    value: int
    children: list["Tree"] = []


def params(fn) -> dict:
    return tool(fn).parameters


def test_scalar_types_and_defaults_make_exact_schema():
    def f(s: str, i: int, x: float, b: bool = False, n: int = 3) -> str:
        return s

    assert params(f) == {
        "additionalProperties": False,
        "properties": {
            "b": {"default": False, "type": "boolean"},
            "i": {"type": "integer"},
            "n": {"default": 3, "type": "integer"},
            "s": {"type": "string"},
            "x": {"type": "number"},
        },
        "required": ["s", "i", "x"],
        "type": "object",
    }


def test_literal_enum_optional_list_dict():
    def f(
        mode: Literal["fast", "slow"],
        color: Color = Color.RED,
        tags: list[str] | None = None,
        weights: dict[str, float] = {},  # noqa: B006
        limit: Optional[int] = None,
    ) -> None:
        pass

    assert params(f) == {
        "additionalProperties": False,
        "properties": {
            "color": {"default": "red", "enum": ["red", "blue"], "type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "mode": {"enum": ["fast", "slow"], "type": "string"},
            "tags": {
                "anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}],
                "default": None,
            },
            "weights": {
                "additionalProperties": {"type": "number"},
                "default": {},
                "type": "object",
            },
        },
        "required": ["mode"],
        "type": "object",
    }


def test_pydantic_model_parameter_is_inlined_without_titles():
    def f(origin: Point, points: list[Point]) -> None:
        """Measure.

        Args:
            origin: where to start.
        """

    point = {
        "description": "A point on the plane.",
        "properties": {
            "x": {"description": "abscissa", "type": "integer"},
            "y": {"default": 0, "type": "integer"},
        },
        "required": ["x"],
        "type": "object",
    }
    assert params(f) == {
        "additionalProperties": False,
        "properties": {
            "origin": {**point, "description": "where to start."},
            "points": {"items": point, "type": "array"},
        },
        "required": ["origin", "points"],
        "type": "object",
    }


def test_recursive_model_is_unrolled_once_into_a_self_contained_schema():
    def f(tree: Tree) -> None:
        pass

    assert params(f) == {
        "additionalProperties": False,
        "properties": {
            "tree": {
                "properties": {
                    "children": {"default": [], "items": {"type": "object"}, "type": "array"},
                    "value": {"type": "integer"},
                },
                "required": ["value"],
                "type": "object",
            }
        },
        "required": ["tree"],
        "type": "object",
    }


async def test_recursive_model_is_still_validated_fully_below_the_unrolled_level():
    @tool
    def f(tree: Tree) -> int:
        return len(tree.children[0].children)

    def nest(leaf: dict) -> dict:
        return {"tree": {"value": 1, "children": [{"value": 2, "children": [leaf]}]}}

    assert await f.ainvoke(nest({"value": 3})) == "1"
    with pytest.raises(ToolArgumentsError, match=r"field 'tree.children.0.children.0.value'"):
        await f.ainvoke(nest({}))


def test_schemas_have_no_refs_so_they_nest_inside_a_tool_call_schema():
    """Forced tool calls nest each tool's parameters under ``arguments``; a root
    ``#/$defs`` pointer would dangle there, so llguidance must compile the nest."""
    from loom.runtime.structured_output.tool_call import tool_call_schema

    def f(color: Color, origin: Point, tree: Tree | None = None) -> None:
        pass

    schema = tool_call_schema([tool(f).openai_schema()])
    assert "$ref" not in json.dumps(schema) and "$defs" not in json.dumps(schema)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    assert llguidance.LLMatcher.validate_grammar(grammar) == ""  # "" = no error


def test_annotated_constraints_and_property_named_title_survive():
    def f(title: str, k: Annotated[int, Field(ge=1, le=10)] = 5) -> None:
        pass

    assert params(f) == {
        "additionalProperties": False,
        "properties": {
            "k": {"default": 5, "maximum": 10, "minimum": 1, "type": "integer"},
            "title": {"type": "string"},
        },
        "required": ["title"],
        "type": "object",
    }


def test_google_docstring_gives_description_and_parameter_descriptions():
    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        """Current weather for a city.

        Reads the latest observation of the
        nearest station.

        Args:
            city: city name,
                e.g. "Paris".
            unit: temperature unit.

        Returns:
            a sentence.
        """
        return ""

    t = tool(get_weather)
    assert t.description == (
        "Current weather for a city.\n\nReads the latest observation of the nearest station."
    )
    assert t.parameters["properties"] == {
        "city": {"description": 'city name, e.g. "Paris".', "type": "string"},
        "unit": {
            "default": "C",
            "description": "temperature unit.",
            "enum": ["C", "F"],
            "type": "string",
        },
    }


def test_rest_docstring_is_parsed_too():
    def f(a: int) -> int:
        """Double a number.

        :param a: the number.
        """
        return 2 * a

    t = tool(f)
    assert t.description == "Double a number."
    assert t.parameters["properties"]["a"] == {"description": "the number.", "type": "integer"}


def test_parameter_names_that_shadow_basemodel_attributes_work():
    def f(json: str, model_config: int = 1, schema: bool = True) -> None:
        pass

    assert sorted(params(f)["properties"]) == ["json", "model_config", "schema"]


def test_no_parameters_gives_empty_object_schema():
    def ping() -> str:
        """Ping."""
        return "pong"

    assert params(ping) == {"additionalProperties": False, "properties": {}, "type": "object"}


def test_var_args_are_refused():
    def f(*args: int) -> None:
        pass

    with pytest.raises(TypeError, match=r"\*args or \*\*kwargs"):
        tool(f)


def test_openai_schema_sorts_its_keys_but_keeps_the_arguments_in_signature_order():
    # a forced call writes its arguments in the schema's order, and models expect the signature's
    def b_tool(z: int, a: str, properties: dict[str, int]) -> None:
        """B."""

    schema = tool(b_tool).openai_schema()
    assert json.dumps(schema) == (
        '{"function": {"description": "B.", "name": "b_tool", "parameters": '
        '{"additionalProperties": false, "properties": {"z": {"type": "integer"}, '
        '"a": {"type": "string"}, "properties": {"additionalProperties": {"type": "integer"}, "type": "object"}}, '
        '"required": ["z", "a", "properties"], "type": "object"}}, '
        '"type": "function"}'
    )
