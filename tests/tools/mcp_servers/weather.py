"""A small MCP server for the tests, over stdio (default) or streamable HTTP (``--http PORT``).

Its tools: ``get_weather`` (a fixed forecast), ``add`` (structured output),
``fail`` (an ``isError`` result), ``sleep`` (hangs for ``seconds``), ``die``
(the process exits mid-call) and ``pid`` (the server's process id).
``MCP_TOOL_ORDER=reverse`` registers them in reverse order, so ``tools/list``
answers in a different order; ``MCP_SERVER_NAME`` names the server.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated

from pydantic import Field

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer(os.environ.get("MCP_SERVER_NAME", "weather"), log_level="ERROR")


def get_weather(city: Annotated[str, Field(description="City name, e.g. Paris.")]) -> str:
    """Current weather for a city."""
    return f"Sunny, 21 C in {city}."


def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": a + b}


def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(f"cannot do it: {reason}")


def sleep(seconds: float) -> str:
    """Sleep for a number of seconds, then answer."""
    time.sleep(seconds)
    return f"slept {seconds} s"


def die() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


TOOLS = [get_weather, add, fail, sleep, die, pid]
for fn in reversed(TOOLS) if os.environ.get("MCP_TOOL_ORDER") == "reverse" else TOOLS:
    server.add_tool(fn)

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run()
