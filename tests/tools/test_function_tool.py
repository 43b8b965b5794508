"""``@tool`` / ``FunctionTool``: decorator forms, validation, sync and async calls."""

import asyncio
import dataclasses
import threading
import time

import pytest
from pydantic import BaseModel

from loom.tools import FunctionTool, Tool, ToolArgumentsError, tool


class Item(BaseModel):
    name: str
    qty: int = 1


def test_bare_and_parametrised_decorator_forms():
    @tool
    def a(x: int) -> int:
        """A."""
        return x

    @tool(name="renamed", description="Custom.", timeout_s=1.5)
    def b(x: int) -> int:
        """Ignored docstring."""
        return x

    assert isinstance(a, FunctionTool) and isinstance(a, Tool)
    assert (a.name, a.description, a.timeout_s) == ("a", "A.", None)
    assert (b.name, b.description, b.timeout_s) == ("renamed", "Custom.", 1.5)
    assert a(3) == 3  # still callable directly


@pytest.mark.parametrize("bad", ["has space", "", "x" * 65, "dot.name"])
def test_invalid_tool_name_raises_value_error_naming_field(bad):
    with pytest.raises(ValueError, match="name"):
        tool(name=bad)(lambda: None)


def test_non_positive_timeout_raises():
    with pytest.raises(ValueError, match="timeout_s"):
        tool(name="t", timeout_s=0)(lambda: None)


async def test_arguments_are_coerced_and_models_built_before_the_call():
    seen = {}

    @tool
    def order(item: Item, count: int, urgent: bool = False) -> str:
        seen.update(item=item, count=count, urgent=urgent)
        return "ok"

    assert await order.ainvoke({"item": {"name": "pen"}, "count": "3"}) == "ok"
    assert seen == {"item": Item(name="pen", qty=1), "count": 3, "urgent": False}


async def test_invalid_arguments_name_the_field_and_skip_the_call():
    calls = []

    @tool
    def order(item: Item, count: int) -> str:
        calls.append(1)
        return "ok"

    with pytest.raises(ToolArgumentsError) as info:
        await order.ainvoke({"item": {"qty": 2}, "count": "many", "extra": 1})
    message = str(info.value)
    assert "field 'item.name': Field required" in message
    assert "field 'count': Input should be a valid integer" in message
    assert "(got 'many')" in message
    assert "field 'extra': Extra inputs are not permitted" in message
    assert info.value.param == "item.name"
    assert calls == []


async def test_non_object_arguments_are_rejected():
    @tool
    def f(x: int) -> int:
        return x

    with pytest.raises(ToolArgumentsError, match="must be a JSON object, got list"):
        await f.ainvoke([1])  # type: ignore[arg-type]


async def test_sync_tool_runs_off_the_event_loop_thread():
    loop_thread = threading.get_ident()

    @tool
    def where() -> int:
        return threading.get_ident()

    assert int(await where.ainvoke({})) != loop_thread


async def test_blocking_sync_tool_does_not_block_the_loop():
    @tool
    def slow() -> str:
        time.sleep(0.3)
        return "done"

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    assert await slow.ainvoke({}) == "done"
    task.cancel()
    assert ticks >= 10  # the loop kept running while the tool slept


async def test_async_tool_is_awaited_on_the_loop():
    @tool
    async def fetch(key: str) -> dict:
        await asyncio.sleep(0)
        return {"key": key, "thread": threading.get_ident()}

    out = await fetch.ainvoke({"key": "k"})
    assert out == f'{{"key": "k", "thread": {threading.get_ident()}}}'


@dataclasses.dataclass
class Point:
    y: int
    x: int


async def test_non_string_results_are_canonical_json():
    @tool
    def many() -> dict:
        return {"b": [1, 2.5, None], "a": "é", "p": Point(y=2, x=1), "m": Item(name="n")}

    assert await many.ainvoke({}) == (
        '{"a": "é", "b": [1, 2.5, null], "m": {"name": "n", "qty": 1}, "p": {"x": 1, "y": 2}}'
    )


async def test_none_result_is_empty_string_and_str_result_is_unchanged():
    @tool
    def nothing() -> None:
        return None

    @tool
    def text() -> str:
        return '{"not": "reformatted"}'

    assert await nothing.ainvoke({}) == ""
    assert await text.ainvoke({}) == '{"not": "reformatted"}'


async def test_positional_only_parameters_are_passed_positionally():
    @tool
    def f(a: int, /, b: int = 0) -> int:
        return a * 10 + b

    assert await f.ainvoke({"a": 4, "b": 2}) == "42"


async def test_exception_inside_sync_tool_propagates_to_ainvoke():
    @tool
    def boom() -> str:
        raise KeyError("missing")

    with pytest.raises(KeyError):
        await boom.ainvoke({})


async def test_bound_method_becomes_a_tool_without_self():
    class Counter:
        def __init__(self) -> None:
            self.total = 10

        def add(self, amount: int) -> int:
            """Add to the running total.

            Args:
                amount: how much to add.
            """
            self.total += amount
            return self.total

    counter = Counter()
    t = tool(counter.add)
    assert t.parameters["properties"] == {"amount": {"description": "how much to add.", "type": "integer"}}
    assert await t.ainvoke({"amount": 5}) == "15" and counter.total == 15
