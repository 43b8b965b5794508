"""``calculator``: arithmetic via simpleeval, refused constructs and clear errors."""

import math
import re

import pytest

from loom.tools import ToolError, ToolRegistry
from loom.tools.builtin import calculator, evaluate
from loom.tools.builtin.calculator import EXPRESSION, expression_in


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 10", "1024"),
        ("7 // 2", "3"),
        ("7 % 3", "1"),
        ("-3 + +1", "-2"),
        ("0.1 + 0.2", "0.3"),
        ("1 / 4", "0.25"),
        ("2 ** -1", "0.5"),
        ("sqrt(2) / 2", "0.707106781186548"),
        ("log(8, 2)", "3"),
        ("log10(1000)", "3"),
        ("round(pi, 4)", "3.1416"),
        ("max(1, 5, 3) - min(4, 2)", "3"),
        ("factorial(20)", "2432902008176640000"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("cos(0) + sin(0)", "1"),
        ("hypot(3, 4)", "5"),
    ],
)
def test_arithmetic_and_math_functions(expression, expected):
    assert calculator(expression) == expected


def test_evaluate_returns_numbers():
    assert evaluate("6 * 7") == 42
    assert evaluate("tau / 2") == math.pi


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero in '1 / 0'"),
        ("5 % 0", "division by zero in '5 % 0'"),
        ("1 +", "invalid syntax in '1 +'"),
        ("a = 1", "invalid syntax in 'a = 1'"),
        ("1; 2", "invalid syntax in '1; 2'"),
        ("", "empty expression"),
        ("10 ** 2000", "number too large: 10 ** 2000 has more than 1000 digits"),
        ("9 ** 9 ** 9", "number too large: 9 ** 387420489 has more than 1000 digits"),
        ("(10 ** 999) * (10 ** 999)", "has more than 1000 digits"),
        ("factorial(100000)", "factorial(100000) is too large"),
        ("exp(1000)", "number too large in 'exp(1000)'"),
        ("1e308 * 10", "is not finite: inf"),
        ("(-8) ** 0.5", "is not a real number"),
        ("sqrt(-1)", "math error in 'sqrt(-1)': math domain error"),
        ("x + 1", "unknown name 'x'; allowed constants: e, pi, tau"),
        ("open('f')", "unknown function 'open'"),
        ("__import__('os')", "unknown function '__import__'"),
        ("'a' * 3", "only numbers are allowed, got 'a'"),
        ("True + 1", "only numbers are allowed, got True"),
        ("().__class__", "Attribute is not available"),
        ("(1).real", "Attribute is not available"),
        ("[1, 2][0]", "not allowed in a calculator expression"),
        ("1 < 2", "Compare is not available"),
        ("1 if 1 else 2", "IfExp is not available"),
        ("1" + "+1" * 300, "expression longer than 500 characters"),
    ],
)
def test_refused_and_failing_expressions_raise_clear_tool_errors(expression, message):
    with pytest.raises(ToolError) as info:
        evaluate(expression)
    assert message in str(info.value)


async def test_calculator_errors_reach_the_model_as_error_results():
    reg = ToolRegistry([calculator])
    ok = await reg.call("calculator", '{"expression": "2 * (3 + 4) ** 2"}')
    assert (ok.content, ok.is_error) == ("98", False)
    bad = await reg.call("calculator", {"expression": "1/0"})
    assert (bad.content, bad.is_error, bad.error_type) == (
        "Error: division by zero in '1/0'", True, "tool_error",
    )  # fmt: skip


def test_calculator_schema():
    assert calculator.parameters == {
        "additionalProperties": False,
        "properties": {
            "expression": {
                "description": 'the expression to evaluate, e.g. "2 * (3 + 4) ** 2" or "sqrt(2) / 2".',
                "pattern": EXPRESSION,
                "type": "string",
            }
        },
        "required": ["expression"],
        "type": "object",
    }


@pytest.mark.parametrize("text", ["2 * (3 + 4) ** 2", "sqrt(2) / 2", "365 * 24", "-3 + 4", "log(8, 2)", "1e3 // 7"])
def test_the_expression_pattern_admits_arithmetic(text):
    assert re.fullmatch(EXPRESSION, text)


@pytest.mark.parametrize("text", ["}}  # 12 * 12 = 144", "12 * 12 = 144", "", ". + 25", "x" * 129])
def test_the_expression_pattern_refuses_what_small_models_wrote_into_forced_calls(text):
    assert not re.fullmatch(EXPRESSION, text)


@pytest.mark.parametrize(("text", "expression"), [
    ("What is 17 * 23?", "17 * 23"),
    ("How many seconds are in a day? Compute 24 * 60 * 60.", "24 * 60 * 60"),
    ("What is (2 + 3) ** 2?", "(2 + 3) ** 2"),
    ("Is 10 - 3 equal to 7?", "10 - 3"),
    ("Compute (17 + 25) * 3 - 8.", "(17 + 25) * 3 - 8"),
    ("What does 7 // 2 return?", "7 // 2"),
])
def test_expression_in_finds_the_longest_expression_a_message_writes_out(text, expression):
    assert expression_in(text) == expression


@pytest.mark.parametrize("text", [
    "hello", "How many minutes are in 3.5 hours?", "What changed on 2024-01-02?", "items 10-20",
    "Which Python 3.11 feature is new?", "HTTP/1.1 and utf-8", "What is 5 / 0?", "x = 3 * y",
])
def test_expression_in_finds_none_in_dates_ranges_versions_words_or_what_does_not_compute(text):
    assert expression_in(text) is None
