"""``ToolRegistry``: canonical schemas, and calls whose every failure is a result."""

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from loom.tools import ToolError, ToolRegistry, ToolResult, tool
from loom.tools.builtin import calculator


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: first term.
        b: second term.
    """
    return a + b


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool
def refuse() -> str:
    """Fails with a clean message."""
    raise ToolError("the service is closed today")


@tool
def hang_sync() -> str:
    """Blocks its thread for ten seconds."""
    time.sleep(10.0)
    return "late"


@tool
async def hang_async() -> str:
    """Sleeps for a minute."""
    await asyncio.sleep(60)
    return "late"


@tool
async def inner_timeout() -> str:
    """Raises its own TimeoutError quickly."""
    raise TimeoutError("upstream API timed out")


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([add, echo, explode, refuse, hang_sync, hang_async, inner_timeout])


def test_duplicate_name_raises_value_error():
    reg = ToolRegistry([add])
    with pytest.raises(ValueError, match="'add' is already registered"):
        reg.register(add)


def test_get_and_names(registry):
    assert registry.get("add") is add
    assert registry.get("nope") is None
    assert registry.names == sorted(registry.names)
    assert "echo" in registry and len(registry) == 7


def test_plain_function_is_wrapped_on_register():
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    t = ToolRegistry().register(shout)
    assert t.name == "shout" and t.description == "Upper-case the text."


def test_schemas_are_sorted_and_byte_identical_whatever_the_order():
    one = ToolRegistry([add, echo, explode])
    two = ToolRegistry([explode, echo, add])
    dumps = [json.dumps(r.schemas()) for r in (one, two, one)]
    assert dumps[0] == dumps[1] == dumps[2]
    assert [s["function"]["name"] for s in one.schemas()] == ["add", "echo", "explode"]
    assert list(one.schemas()[0]) == ["function", "type"]
    assert list(one.schemas()[0]["function"]) == ["description", "name", "parameters"]


SCHEMA_SCRIPT = textwrap.dedent(
    '''
    import enum, json
    from typing import Literal, Optional
    from loom.tools import ToolRegistry, tool
    from loom.tools.builtin import calculator

    class Mode(enum.Enum):
        A = "a"
        B = "b"

    @tool
    def zeta(q: str, tags: set[str] = set(), mode: Mode = Mode.A, n: Optional[int] = None) -> str:
        """Z.

        Args:
            q: query.
        """

    @tool
    async def alpha(x: Literal["p", "q"], weights: dict[str, float] = {}) -> str:
        """A."""

    SCHEMAS = json.dumps(ToolRegistry([zeta, calculator, alpha]).schemas())
    '''
)


def test_schemas_are_byte_identical_across_processes():
    namespace: dict = {}
    exec(SCHEMA_SCRIPT, namespace)  # the same source, in this process
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", SCHEMA_SCRIPT + "\nprint(SCHEMAS)"],
        capture_output=True, text=True, env=env, check=True, timeout=60, cwd=REPO_ROOT,
    )  # fmt: skip
    assert out.stdout.strip() == namespace["SCHEMAS"]


async def test_successful_call_returns_content_and_elapsed(registry):
    result = await registry.call("add", {"a": 2, "b": 3})
    assert (result.content, result.is_error, result.error_type) == ("5", False, None)
    assert result.elapsed_ms >= 0.0


async def test_json_string_arguments_are_parsed(registry):
    assert (await registry.call("add", '{"a": 40, "b": 2}')).content == "42"
    assert (await registry.call("echo", '{"text": "hi"}')).content == "hi"


async def test_empty_arguments_mean_no_arguments():
    reg = ToolRegistry([tool(lambda: "pong", name="ping")])
    for empty in (None, "", "  ", {}):
        result = await reg.call("ping", empty)
        assert (result.content, result.is_error) == ("pong", False)


async def test_malformed_json_is_an_error_result(registry):
    result = await registry.call("add", '{"a": 1,')
    assert result.is_error and result.error_type == "invalid_json"
    assert result.content.startswith("Error: arguments for tool 'add' are not valid JSON: ")


async def test_unknown_tool_lists_the_available_ones(registry):
    result = await registry.call("multiply", {"a": 1})
    assert result.is_error and result.error_type == "unknown_tool"
    assert result.content == (
        "Error: unknown tool 'multiply'; available tools: add, echo, explode, "
        "hang_async, hang_sync, inner_timeout, refuse"
    )


async def test_invalid_arguments_name_the_field(registry):
    result = await registry.call("add", {"a": "one"})
    assert result.is_error and result.error_type == "invalid_arguments"
    assert result.content == (
        "Error: invalid arguments for tool 'add': field 'a': Input should be a valid "
        "integer, unable to parse string as an integer (got 'one')"
    )
    missing = await registry.call("add", "{}")
    assert missing.content == "Error: invalid arguments for tool 'add': field 'a': Field required"
    not_object = await registry.call("add", "[1, 2]")
    assert not_object.error_type == "invalid_arguments"
    assert "must be a JSON object, got list" in not_object.content


async def test_exception_in_tool_becomes_error_result(registry):
    result = await registry.call("explode", {"reason": "disk full"})
    assert result == ToolResult(
        "Error: tool 'explode' raised RuntimeError: disk full", True, "tool_error",
        result.elapsed_ms,
    )


async def test_tool_error_message_is_passed_through(registry):
    result = await registry.call("refuse", {})
    assert (result.content, result.error_type) == ("Error: the service is closed today", "tool_error")


async def test_hanging_sync_tool_times_out_and_the_call_returns(registry):
    start = time.perf_counter()
    result = await registry.call("hang_sync", {}, timeout_s=0.2)
    took = time.perf_counter() - start
    assert result.content == "Error: tool 'hang_sync' timed out after 0.2 s"
    assert (result.is_error, result.error_type) == (True, "timeout")
    # returned at the timeout, not when the thread's 10 s sleep ends (a busy machine may add seconds)
    assert 0.2 <= took < 5
    assert 200 <= result.elapsed_ms < 5000


async def test_hanging_async_tool_times_out(registry):
    start = time.perf_counter()
    result = await registry.call("hang_async", {}, timeout_s=0.2)
    assert result.content == "Error: tool 'hang_async' timed out after 0.2 s"
    assert time.perf_counter() - start < 30  # at the timeout, not after the tool's minute


async def test_tool_timeout_applies_when_the_call_sets_none():
    @tool(timeout_s=0.1)
    async def sleepy() -> str:
        await asyncio.sleep(5)
        return "late"

    result = await ToolRegistry([sleepy], default_timeout_s=30).call("sleepy", {})
    assert result.content == "Error: tool 'sleepy' timed out after 0.1 s"


async def test_registry_default_timeout_applies_last():
    @tool
    async def sleepy() -> str:
        await asyncio.sleep(5)
        return "late"

    result = await ToolRegistry([sleepy], default_timeout_s=0.1).call("sleepy", {})
    assert result.error_type == "timeout"


async def test_tools_own_timeout_error_is_not_reported_as_our_timeout(registry):
    result = await registry.call("inner_timeout", {}, timeout_s=5)
    assert result.content == "Error: tool 'inner_timeout' raised TimeoutError: upstream API timed out"
    assert result.error_type == "tool_error"


async def test_concurrent_calls_run_in_parallel(registry):
    # Each sync call blocks its thread until all four are running: calls run one at a
    # time would leave the first alone at the barrier until it breaks (an error result).
    barrier = threading.Barrier(4, timeout=30)

    @tool
    def meet(ms: int) -> int:
        barrier.wait()
        return ms

    reg = ToolRegistry([meet])
    results = await asyncio.gather(*(reg.call("meet", {"ms": 200}) for _ in range(4)))
    assert [(r.content, r.is_error) for r in results] == [("200", False)] * 4


async def test_non_positive_call_timeout_is_a_caller_error(registry):
    with pytest.raises(ValueError, match="timeout_s"):
        await registry.call("add", {"a": 1}, timeout_s=0)


def test_non_positive_default_timeout_raises():
    with pytest.raises(ValueError, match="default_timeout_s"):
        ToolRegistry(default_timeout_s=0)


def test_non_tool_is_refused():
    with pytest.raises(TypeError, match="not a tool"):
        ToolRegistry().register(42)


class UpperTool:
    """A hand-written class implementing the Tool protocol (no decorator)."""

    name = "upper"
    description = "Upper-case text."
    parameters = {"properties": {"text": {"type": "string"}}, "required": ["text"], "type": "object"}
    timeout_s = None

    async def ainvoke(self, arguments: dict) -> str:
        return arguments["text"].upper()

    def openai_schema(self) -> dict:
        fn = {"description": self.description, "name": self.name, "parameters": self.parameters}
        return {"function": fn, "type": "function"}


async def test_any_object_implementing_the_protocol_is_registered_as_is():
    t = UpperTool()
    reg = ToolRegistry([t])
    assert reg.get("upper") is t
    assert (await reg.call("upper", {"text": "abc"})).content == "ABC"
    missing = await reg.call("upper", {})
    assert missing.content == "Error: tool 'upper' raised KeyError: 'text'"


async def test_stop_iteration_and_bare_exceptions_in_sync_tools_are_error_results():
    @tool
    def stop() -> str:
        raise StopIteration

    @tool
    def bare() -> str:
        raise RuntimeError

    reg = ToolRegistry([stop, bare])
    result = await reg.call("stop", {}, timeout_s=2)
    assert (result.error_type, result.content) == (
        "tool_error", "Error: tool 'stop' raised RuntimeError: StopIteration",
    )  # fmt: skip
    assert (await reg.call("bare", {})).content == "Error: tool 'bare' raised RuntimeError"


async def test_double_encoded_json_arguments_are_decoded(registry):
    assert (await registry.call("add", json.dumps(json.dumps({"a": 1, "b": 1})))).content == "2"


def test_hung_sync_tool_does_not_hold_up_asyncio_run_or_interpreter_exit():
    script = textwrap.dedent(
        """
        import asyncio, time
        from loom.tools import ToolRegistry, tool

        @tool
        def stuck() -> str:
            time.sleep(600)
            return "never"

        print(asyncio.run(ToolRegistry([stuck]).call("stuck", {}, timeout_s=0.2)).content)
        """
    )
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300,
        cwd=REPO_ROOT,
    )  # fmt: skip
    assert out.stdout.strip() == "Error: tool 'stuck' timed out after 0.2 s"
    assert time.perf_counter() - start < 300  # import + 0.2 s, not the tool's 600 s
