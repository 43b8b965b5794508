"""Schema derivation: exact JSON schemas from type hints and docstrings."""

import enum
import json
from typing import Annotated, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from tools import tool


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


def test_recursive_model_keeps_defs_and_refs():
    def f(tree: Tree) -> None:
        pass

    schema = params(f)
    assert schema["properties"]["tree"] == {"$ref": "#/$defs/Tree"}
    assert schema["$defs"]["Tree"]["properties"]["children"] == {
        "default": [],
        "items": {"$ref": "#/$defs/Tree"},
        "type": "array",
    }
    assert "title" not in json.dumps(schema)


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


def test_openai_schema_has_canonical_key_order():
    def b_tool(z: int, a: str) -> None:
        """B."""

    schema = tool(b_tool).openai_schema()
    assert json.dumps(schema) == (
        '{"function": {"description": "B.", "name": "b_tool", "parameters": '
        '{"additionalProperties": false, "properties": {"a": {"type": "string"}, '
        '"z": {"type": "integer"}}, "required": ["z", "a"], "type": "object"}}, '
        '"type": "function"}'
    )
