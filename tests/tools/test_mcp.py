"""MCP servers as tools (loom.tools.mcp): real FastMCP servers over stdio and streamable HTTP, real calls.

The fixture server is tests/tools/mcp_servers/weather.py (the official ``mcp`` SDK).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from loom.tools import ToolRegistry
from loom.tools.mcp import MCPServerStdio, MCPServerStreamableHttp, mcp_tools
from loom.tools.mcp_config import load_mcp_config, servers_from_config

SERVER = str(Path(__file__).parent / "mcp_servers" / "weather.py")


def _stdio(**env: str) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [SERVER], env=env or None, name="weather")


@pytest.fixture(scope="module")
def weather():
    server = _stdio()
    yield server
    server.close()


def _call(registry: ToolRegistry, name: str, args: dict, **kw):
    return asyncio.run(registry.call(name, args, **kw))


def test_tools_are_listed_sorted_with_canonical_schemas(weather) -> None:
    tools = weather.tools()
    assert [t.name for t in tools] == ["add", "die", "fail", "get_weather", "pid", "sleep"]
    schema = next(t for t in tools if t.name == "get_weather").openai_schema()
    assert schema["function"]["parameters"] == {
        "properties": {"city": {"description": "City name, e.g. Paris.", "type": "string"}},
        "required": ["city"], "type": "object"}


def test_calls_work_from_separate_event_loops_and_errors_become_results(weather) -> None:
    reg = ToolRegistry(weather.tools(), default_timeout_s=5)
    # each asyncio.run is a new event loop (as Agent.run per turn): the connection survives them
    assert _call(reg, "get_weather", {"city": "Paris"}).content == "Sunny, 21 C in Paris."
    assert json.loads(_call(reg, "add", {"a": 2, "b": 3}).content) == {"sum": 5}
    failed = _call(reg, "fail", {"reason": "no data"})
    assert failed.is_error and "cannot do it: no data" in failed.content and "Traceback" not in failed.content
    bad = _call(reg, "add", {"a": "two", "b": 3})
    assert bad.is_error and "'a'" in bad.content  # checked locally against the schema, naming the field


def test_a_server_that_dies_mid_call_gives_an_error_result_and_is_restarted(weather) -> None:
    reg = ToolRegistry(weather.tools(), default_timeout_s=10)
    pid_before = _call(reg, "pid", {}).content
    died = _call(reg, "die", {})
    assert died.is_error and "closed the connection" in died.content and "Traceback" not in died.content
    assert _call(reg, "get_weather", {"city": "Rome"}).content == "Sunny, 21 C in Rome."
    assert _call(reg, "pid", {}).content != pid_before
    assert weather.connections >= 2


def test_a_hanging_call_times_out_and_the_server_still_answers(weather) -> None:
    reg = ToolRegistry(weather.tools(), default_timeout_s=10)
    hung = _call(reg, "sleep", {"seconds": 30}, timeout_s=0.5)
    assert hung.is_error and hung.error_type == "timeout"
    assert _call(reg, "get_weather", {"city": "Oslo"}).content == "Sunny, 21 C in Oslo."


def test_tool_order_of_the_server_does_not_change_the_rendered_prompt(weather, real_model) -> None:
    """A server listing its tools in reverse order (or restarting) renders byte-identical schemas,
    so every session's cached prefix survives."""
    from transformers import AutoTokenizer

    from loom.orchestrator.context import ContextBuilder

    reverse = _stdio(MCP_TOOL_ORDER="reverse")
    try:
        a = ToolRegistry(weather.tools()).schemas()
        b = ToolRegistry(reverse.tools()).schemas()
    finally:
        reverse.close()
    assert json.dumps(a) == json.dumps(b)
    tok = AutoTokenizer.from_pretrained(real_model)
    assert ContextBuilder(tok, "sys", a).header_ids == ContextBuilder(tok, "sys", b).header_ids


def test_two_servers_with_the_same_tool_name_need_a_prefix() -> None:
    one, two = _stdio(), MCPServerStdio(sys.executable, [SERVER], name="other")
    try:
        with pytest.raises(ValueError, match="prefix_tools"):
            mcp_tools([one, two])
        prefixed = MCPServerStdio(sys.executable, [SERVER], name="other", prefix_tools=True)
        try:
            names = [t.name for t in mcp_tools([one, prefixed])]
            assert "other__get_weather" in names and "get_weather" in names
        finally:
            prefixed.close()
    finally:
        one.close()
        two.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_server_lists_and_calls_and_survives_a_restart() -> None:
    port = _free_port()

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], env={**os.environ},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                return proc
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.kill()
        raise RuntimeError("MCP HTTP server did not start")

    proc = start()
    server = MCPServerStreamableHttp(f"http://127.0.0.1:{port}/mcp", name="web")
    try:
        reg = ToolRegistry(server.tools(), default_timeout_s=10)
        assert _call(reg, "get_weather", {"city": "Lima"}).content == "Sunny, 21 C in Lima."
        proc.kill()
        proc.wait()
        down = _call(reg, "get_weather", {"city": "Lima"})
        assert down.is_error and "Traceback" not in down.content
        proc = start()
        assert _call(reg, "get_weather", {"city": "Kyiv"}).content == "Sunny, 21 C in Kyiv."
    finally:
        server.close()
        proc.kill()


def test_config_file_in_the_mcpServers_format(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {
        "weather": {"command": sys.executable, "args": [SERVER], "timeout_s": 5},
        "web": {"url": "http://127.0.0.1:9/mcp", "type": "streamable-http"}}}))
    servers = load_mcp_config(cfg)
    assert [(s.name, type(s).__name__) for s in servers] == [
        ("weather", "MCPServerStdio"), ("web", "MCPServerStreamableHttp")]
    for bad, where in [({"mcpServers": {"x": {"command": "a", "url": "http://h"}}}, "mcpServers.x"),
                       ({"mcpServers": {"x": {"command": "a", "bogus": 1}}}, "mcpServers.x.bogus"),
                       ({"mcpServers": {"x": {"url": "ftp://h"}}}, "mcpServers.x"),
                       ({"servers": {}}, "mcpServers")]:
        with pytest.raises(ValueError, match=where.replace(".", r"\.")):
            servers_from_config(bad)


def test_agent_turn_with_the_real_model_calls_an_mcp_tool_and_answers(weather, real_model, real_quantization) -> None:
    from loom.orchestrator import Agent, ContextBudget
    from loom.runtime import LLM

    llm = LLM(str(real_model), max_model_len=2048, num_kv_blocks=256, quantization=real_quantization)
    agent = Agent(llm, tools=weather.tools(), system_prompt="You are a helpful assistant.",
                  budget=ContextBudget(reserved_output=64), max_steps=3)
    result = agent.run("What is the weather in Paris?", tool_choice="get_weather")
    assert [c.name for c in result.tool_calls][:1] == ["get_weather"]
    first = result.tool_results[0]
    assert not first.is_error and first.content.startswith("Sunny, 21 C in ")
    assert result.final_state in ("done", "max_steps")
    # a dead server mid-turn is an error result; the loop goes on to the next step
    result = agent.run("And now run the die tool.", tool_choice="die")
    assert [c.name for c in result.tool_calls][:1] == ["die"] and result.tool_calls[0].arguments == {}
    assert result.tool_results[0].is_error and "closed the connection" in result.tool_results[0].content
    assert result.steps >= 2
    assert llm.engine.kv.num_free_blocks == llm.engine.kv.num_blocks
