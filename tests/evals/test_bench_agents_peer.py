"""The llama.cpp + LangGraph peer of ``loom bench agents``: its LangGraph agent (forced tool call, the tool's
latency, then an answer, a checkpointer keeping each session's messages) runs the workload against a real
OpenAI-compatible server on loopback (``loom serve`` on the tiny random-weight checkpoint; ``llama-server`` is
not built in the test environment), and the peer's setup fails in one clear line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import typer

from loom.evals.bench_agents import _peer_gguf
from loom.evals.bench_agents_peer import LlamaServer, _workload


def test_the_langgraph_agent_calls_the_tool_then_answers_and_keeps_each_sessions_messages(server):
    cfg = {"sessions": 2, "turns": 2, "k": 0, "tool_ms": 50.0, "think_ms": 10.0, "seed": 0, "max_tokens": 4}
    wall, calls, prompt, errors = asyncio.run(_workload(server.url, None, cfg, forced_tokens=48))
    assert errors == [] and calls == 2 * 2 * 2  # each turn: the forced call, then the answer
    assert wall >= 2 * 0.05 * 0.3  # the tool's drawn latency was waited for (log-normal around 50 ms)
    assert prompt > 0


def test_a_missing_llama_server_or_gguf_is_one_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="llama-server"):
        LlamaServer(tmp_path / "llama-server", tmp_path / "m.gguf", slots=1, slot_tokens=256).start()
    with pytest.raises(typer.BadParameter, match="no GGUF"):
        _peer_gguf("no-such-model", None)
