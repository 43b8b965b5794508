"""The stack a user would build instead of Loom, for ``loom bench agents``: llama.cpp's server driven by a
LangGraph agent, on the same workload.

The server is ``llama-server`` built from the llama.cpp sources the ``llama-cpp-python`` sdist vendors
(``make bench-llama-server``), on the model's registered GGUF, as its README recommends for several
clients: one slot per session (``--parallel``), each slot twice Loom's context window
(``--ctx-size`` = sessions x 2 x window):
a LangGraph agent keeps every turn's retrieved chunks in its messages, so by the third turn its prompts
outgrow Loom's window (2,082-2,204 tokens against 2,048, answered 400), and with a unified buffer as
small as Loom's pool, or one slot's share of it, the server answers turns past the first with 500
"Context size has been exceeded" instead of queueing them; prompt caching on (its default, with its
host-memory prompt cache,
``--cache-ram``), ``--jinja`` chat templates (tool calls), 2 threads, metrics on.

The agent is what LangGraph's documentation builds for a forced tool call: a ``StateGraph`` over
``MessagesState`` with three nodes, ``call`` (the chat model with the ``lookup`` tool bound,
``tool_choice="required"``), ``tools`` (``ToolNode``: the same log-normal latency as Loom's tool) and
``answer`` (the same binding, ``tool_choice="none"``, so the prompt's tool list stays the same and the
server's prompt cache can serve it), with a ``MemorySaver`` checkpointer holding each session's messages
(one thread per session).  The chat model is ``langchain_openai.ChatOpenAI`` on the server's
OpenAI-compatible endpoint, temperature 0.  Retrieval: the same index and ``k`` as Loom's agent, the chunks
put before the question in the user's message.  Sessions, questions, seeds, tool and think times are
Loom's workload's (:mod:`loom.evals.bench_agents`).

Measured: the job completion time (wall time until the last session ends) and, from the server's
``/metrics``, the prompt tokens it computed against the prompt tokens the calls sent (``usage``).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loom.evals import agent_workload as W
from loom.evals.subprocess_server import terminate, wait_until_healthy
from loom.json_types import JSONObject

_METRIC = re.compile(r"^llamacpp:(prompt_tokens_total|tokens_predicted_total)\s+([0-9.eE+-]+)$", re.M)


@dataclass
class PeerRun:
    """The peer's figures for one run."""

    wall_s: float
    calls: int
    prompt_tokens: int  # sent, as the server's usage counted them
    computed_tokens: int  # prompt tokens the server computed (not served from its cache)
    failed_calls: int
    errors: list[str]  # the first few failed turns' errors

    def figures(self) -> JSONObject:
        """Per-run figures, named as Loom's runs name theirs."""
        return {"job_completion_s": self.wall_s, "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "computed_tokens": self.computed_tokens, "failed_calls": self.failed_calls, "errors": self.errors,
                "hit_rate": 1 - self.computed_tokens / self.prompt_tokens if self.prompt_tokens else 0.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One ``llama-server`` process on loopback (started by :meth:`start`, stopped by :meth:`stop`).

    Raises:
        FileNotFoundError: (from :meth:`start`) naming the binary or the GGUF when missing.
        RuntimeError: (from :meth:`start`) the server exited or was not healthy in ``timeout_s``, with its log's tail.
    """

    def __init__(self, binary: Path, gguf: Path, slots: int, slot_tokens: int, threads: int = 2) -> None:
        self.binary, self.gguf, self.slots, self.slot_tokens, self.threads = binary, gguf, slots, slot_tokens, threads
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)

    def command(self) -> list[str]:
        """The server's command line."""
        return [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                "--parallel", str(self.slots), "--ctx-size", str(self.slots * self.slot_tokens),
                "--threads", str(self.threads), "--threads-batch", str(self.threads), "--jinja", "--metrics",
                "--no-webui"]

    def start(self, timeout_s: float = 120) -> LlamaServer:
        for path, what in ((self.binary, "llama-server"), (self.gguf, "gguf")):
            if not Path(path).is_file():
                raise FileNotFoundError(f"{what}: {path} does not exist")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT)
        if wait_until_healthy(self.proc, f"{self.url}/health", timeout_s):
            return self
        self.stop()
        raise RuntimeError(f"llama-server did not start: {Path(self._log.name).read_text()[-2000:]}")

    def metrics(self) -> dict[str, float]:
        """``prompt_tokens_total`` and ``tokens_predicted_total`` from ``/metrics``."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return {name: float(value) for name, value in _METRIC.findall(text)}

    def stop(self) -> None:
        terminate(self.proc)
        self._log.close()
        os.unlink(self._log.name)


def _graph(base_url: str, cfg: JSONObject, forced_tokens: int) -> tuple[Any, dict[str, float]]:
    """The LangGraph agent (see the module docstring) and the per-session tool delays it reads."""
    from langchain_core.messages import SystemMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode
    from pydantic import SecretStr

    delays: dict[str, float] = {}  # thread id -> this turn's drawn tool latency (ms)

    @tool
    async def lookup(topic: str) -> str:
        """Look a topic up in the team's notes.

        Args:
            topic: what to look up.
        """
        return f"Notes on {topic[:40]}: see the documentation; examples in the repository."

    async def timed_lookup(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        await asyncio.sleep(delays.get(config["configurable"]["thread_id"], 0.0) / 1000)
        return await tools.ainvoke(state, config)

    system = SystemMessage("You are a concise assistant for Python questions.")
    served = httpx.get(f"{base_url}/v1/models", timeout=30).json()["data"][0]["id"]  # the name the server answers to
    model = ChatOpenAI(base_url=f"{base_url}/v1", api_key=SecretStr("none"), model=served, temperature=0.0,
                       max_retries=0, timeout=300)
    caller = model.bind_tools([lookup], tool_choice="required").bind(max_tokens=forced_tokens)
    answerer = model.bind_tools([lookup], tool_choice="none").bind(max_tokens=cfg["max_tokens"])
    tools = ToolNode([lookup])

    async def call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await caller.ainvoke([system, *state["messages"]])]}

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await answerer.ainvoke([system, *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("call", call)
    graph.add_node("tools", timed_lookup)
    graph.add_node("answer", answer)
    graph.add_edge(START, "call")
    graph.add_edge("call", "tools")
    graph.add_edge("tools", "answer")
    return graph.compile(checkpointer=MemorySaver()), delays


async def _workload(base_url: str, retriever: Any, cfg: JSONObject,
                    forced_tokens: int) -> tuple[float, int, int, list[str]]:
    """Every session's turns at once; returns (wall seconds, calls, prompt tokens sent, the failed turns' errors)."""
    from langchain_core.messages import AIMessage, HumanMessage

    app, delays = _graph(base_url, cfg, forced_tokens)
    counts = {"calls": 0, "prompt": 0, "failed": 0}
    errors: list[str] = []

    async def session(s: int) -> None:
        rng = W.session_rng(cfg["seed"], s)
        thread = f"bench-{s}"
        for t in range(cfg["turns"]):
            question = W.question(s, t)
            delays[thread] = W.draw_ms(rng, cfg["tool_ms"])  # drawn in the same order as Loom's workload
            if cfg["k"]:
                hits = await asyncio.to_thread(retriever.search, question, cfg["k"])
                question = "Documentation:\n" + "\n\n".join(h.text for h in hits) + f"\n\nQuestion: {question}"
            before = len((app.get_state({"configurable": {"thread_id": thread}}).values or {}).get("messages", []))
            try:
                state = await app.ainvoke({"messages": [HumanMessage(question)]},
                                          {"configurable": {"thread_id": thread}})
            except Exception as exc:  # a call the server refused or a tool call it could not parse
                counts["failed"] += 1
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                for message in state["messages"][before:]:
                    if isinstance(message, AIMessage) and message.usage_metadata:
                        counts["calls"] += 1
                        counts["prompt"] += int(message.usage_metadata["input_tokens"])
            await asyncio.sleep(W.draw_ms(rng, cfg["think_ms"]) / 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(session(s) for s in range(cfg["sessions"])))
    return time.perf_counter() - t0, counts["calls"], counts["prompt"], errors


def run_peer(binary: Path, gguf: Path, retriever: Any, cfg: JSONObject, forced_tokens: int) -> PeerRun:
    """Start ``llama-server``, run the workload through the LangGraph agent, stop the server.

    Args:
        forced_tokens: ``max_tokens`` of the forced tool call (Loom's forced-call minimum).

    Raises:
        FileNotFoundError, RuntimeError: as :meth:`LlamaServer.start`.
    """
    server = LlamaServer(binary, gguf, int(cfg["sessions"]), 2 * int(cfg["max_model_len"])).start()
    try:
        before = server.metrics()
        wall, calls, prompt, errors = asyncio.run(_workload(server.url, retriever, cfg, forced_tokens))
        after = server.metrics()
    finally:
        server.stop()
    computed = int(after.get("prompt_tokens_total", 0) - before.get("prompt_tokens_total", 0))
    return PeerRun(wall, calls, prompt, computed, len(errors), errors[:3])
