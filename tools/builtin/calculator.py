"""``calculator``: safe arithmetic for the model, evaluated by ``simpleeval``.

Never ``eval``: the expression is parsed with ``ast.parse(mode="eval")`` (one
expression, no statements) and walked by a ``simpleeval.SimpleEval`` limited to
numbers, the arithmetic operators ``+ - * / // % **``, unary ``+ -``, the
functions in :data:`FUNCTIONS` and the constants ``pi``, ``e``, ``tau``.
Attribute access, subscripts, comparisons, strings and every other node type
are refused.  Sizes are bounded so a call stays cheap: expressions up to
:data:`MAX_EXPRESSION_CHARS` characters, integer results up to
:data:`MAX_DIGITS` digits (checked before a power is computed), finite floats.
Errors (division by zero, bad syntax, unknown names, huge powers, math domain
errors) raise :class:`~loom.tools.base.ToolError` with a message for the model.

:func:`expression_in` finds an expression a message writes out (``"What is 17 * 23?"``), so an agent can
hand it to this tool itself (``loom.orchestrator.runner``) instead of hoping a small model calls it.
"""

import ast
import math
import operator as op
import re
from typing import Annotated

from pydantic import Field
from simpleeval import (
    FeatureNotAvailable,
    FunctionNotDefined,
    InvalidExpression,
    NameNotDefined,
    NumberTooHigh,
    SimpleEval,
)

from loom.python_ast import parse as parse_python
from loom.tools.base import ToolError
from loom.tools.function_tool import tool

__all__ = [
    "FUNCTIONS", "MAX_DIGITS", "MAX_EXPRESSION_CHARS", "calculator", "evaluate", "expression_in", "format_number",
]  # fmt: skip

MAX_EXPRESSION_CHARS = 500
MAX_DIGITS = 1000
_MAX_FACTORIAL = 1000


def _safe_pow(base: float, exponent: float) -> float:
    """``base ** exponent``, refused before computing when the result would
    exceed :data:`MAX_DIGITS` digits."""
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise NumberTooHigh(f"{base!r} ** {exponent!r} has more than {MAX_DIGITS} digits")
    return base**exponent


def _factorial(n: int) -> int:
    if isinstance(n, int) and n > _MAX_FACTORIAL:
        raise NumberTooHigh(f"factorial({n}) is too large (max factorial({_MAX_FACTORIAL}))")
    return math.factorial(n)


def _log(x: float, base: float = math.e) -> float:
    return math.log(x, base)


_OPERATORS = {
    ast.Add: op.add,
    ast.Sub: op.sub,
    ast.Mult: op.mul,
    ast.Div: op.truediv,
    ast.FloorDiv: op.floordiv,
    ast.Mod: op.mod,
    ast.Pow: _safe_pow,
    ast.USub: op.neg,
    ast.UAdd: op.pos,
}

#: Functions an expression may call, by name.
FUNCTIONS = {
    "abs": abs, "round": round, "min": min, "max": max, "pow": _safe_pow,
    "sqrt": math.sqrt, "cbrt": math.cbrt, "exp": math.exp, "log": _log,
    "log10": math.log10, "log2": math.log2, "sin": math.sin, "cos": math.cos,
    "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "degrees": math.degrees, "radians": math.radians, "floor": math.floor,
    "ceil": math.ceil, "trunc": math.trunc, "hypot": math.hypot,
    "factorial": _factorial, "gcd": math.gcd, "lcm": math.lcm,
}  # fmt: skip
_NAMES = {"pi": math.pi, "e": math.e, "tau": math.tau}
_REFUSED_NODES = (
    ast.Attribute, ast.Subscript, ast.Compare, ast.BoolOp, ast.IfExp, ast.JoinedStr,
    ast.FormattedValue, ast.Assign, ast.AugAssign, ast.Import, ast.Slice,
)  # fmt: skip


class _ArithmeticEval(SimpleEval):
    """``SimpleEval`` restricted to numbers and arithmetic."""

    def __init__(self) -> None:
        super().__init__(operators=_OPERATORS, functions=FUNCTIONS, names=_NAMES)
        for node in _REFUSED_NODES:
            self.nodes.pop(node, None)

    def _eval_constant(self, node: ast.Constant) -> int | float:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FeatureNotAvailable(f"only numbers are allowed, got {value!r}")
        return value


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; return an ``int`` or a finite ``float``.

    Raises:
        ToolError: empty or too long expression, bad syntax, a refused
            construct, unknown name or function, division by zero, a result
            that is too large, not finite or not real, a math domain error.
    """
    text = expression.strip()
    if not text:
        raise ToolError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = parse_python(text, mode="eval")
        value = _ArithmeticEval().eval(text, previously_parsed=tree.body)
    except SyntaxError as exc:
        raise ToolError(f"invalid syntax in {text!r}: {exc.msg}") from None
    except ZeroDivisionError:
        raise ToolError(f"division by zero in {text!r}") from None
    except NumberTooHigh as exc:
        raise ToolError(f"number too large: {exc}") from None
    except OverflowError:
        raise ToolError(f"number too large in {text!r}") from None
    except NameNotDefined as exc:
        allowed = ", ".join(sorted(_NAMES))
        raise ToolError(f"unknown name {exc.name!r}; allowed constants: {allowed}") from None
    except FunctionNotDefined as exc:
        allowed = ", ".join(sorted(FUNCTIONS))
        raise ToolError(f"unknown function {exc.func_name!r}; allowed: {allowed}") from None
    except (FeatureNotAvailable, InvalidExpression) as exc:
        raise ToolError(f"not allowed in a calculator expression: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ToolError(f"math error in {text!r}: {exc}") from None
    return _check_result(value, text)


def _check_result(value: object, text: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"result of {text!r} is not a real number: {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError(f"result of {text!r} is not finite: {value!r}")
    if isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise ToolError(f"number too large: result of {text!r} has more than {MAX_DIGITS} digits")
    return value


def format_number(value: int | float) -> str:
    """Integers exactly; floats with up to 15 significant digits (``0.1+0.2`` → ``0.3``)."""
    return str(value) if isinstance(value, int) else format(value, ".15g")


# Numbers joined by binary operators, with parentheses: "17 * 23", "(2 + 3) ** 2", "24 * 60 * 60". A minus counts
# only with spaces on both sides, so dates (2024-01-02), ranges (10-20) and versions are not sums.
_OPERAND = r"\(*\s*\d+(?:\.\d+)?(?:\s*\))*"
_WRITTEN = re.compile(rf"{_OPERAND}(?:(?:\s*(?:\*\*|//|[+*/%])\s*|\s+-\s+){_OPERAND})+")


def expression_in(text: str) -> str | None:
    """The longest arithmetic expression written out in ``text`` that :func:`evaluate` computes (numbers
    joined by ``+ - * / // % **``, parentheses allowed; a minus only with spaces around it), or ``None``.

    ``"How many seconds are in a day? Compute 24 * 60 * 60."`` gives ``"24 * 60 * 60"``; ``"What changed in
    2024-01-02?"``, ``"Which Python 3.11 feature ...?"`` and a number alone give ``None``.
    """
    found = sorted((m.group().strip() for m in _WRITTEN.finditer(text)), key=len, reverse=True)
    for expression in found:
        if expression.count("(") != expression.count(")"):
            continue
        try:
            evaluate(expression)
        except ToolError:
            continue
        return expression
    return None


# The grammar of a forced call keeps the argument an expression: digits, names of functions and constants,
# operators, parentheses and spaces (no "=", "#" or braces), at most 128 characters. Without it SmolLM2-135M
# wrote '}}  # 12 * 12 = 144.0000...' into the string; measured on 8 arithmetic questions with the call forced,
# answers with the right result went from 4/8 to 7/8 (int4) and from 6/8 to 8/8 (float32).
EXPRESSION = r"^[-0-9a-z(][-+*/%0-9A-Za-z_.,() ]{0,127}$"


@tool
def calculator(expression: Annotated[str, Field(pattern=EXPRESSION)]) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports numbers, + - * / // % ** and parentheses, the functions abs, round,
    min, max, pow, sqrt, cbrt, exp, log(x, base), log10, log2, sin, cos, tan,
    asin, acos, atan, atan2, sinh, cosh, tanh, degrees, radians, floor, ceil,
    trunc, hypot, factorial, gcd, lcm, and the constants pi, e, tau.

    Args:
        expression: the expression to evaluate, e.g. "2 * (3 + 4) ** 2" or "sqrt(2) / 2".
    """
    return format_number(evaluate(expression))
