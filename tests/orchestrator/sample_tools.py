"""Small tools the orchestrator tests call: one that works, one slow, one that raises, one that hangs."""

from __future__ import annotations

import asyncio

from loom.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend.
        b: second addend.
    """
    return a + b


@tool
async def slow_echo(text: str) -> str:
    """Echo text after 0.3 s.

    Args:
        text: what to echo.
    """
    await asyncio.sleep(0.3)
    return text


@tool
def explode(text: str) -> str:
    """Always fails.

    Args:
        text: ignored.
    """
    raise RuntimeError("kaboom")


@tool(timeout_s=0.2)
async def hang(text: str) -> str:
    """Never returns in time.

    Args:
        text: ignored.
    """
    await asyncio.sleep(10)
    return text
