"""What one server process holds: engine, store, index, memory, metrics, in-flight count.

``Services.start`` runs once in the app's lifespan: it opens the database (and
marks turns a killed process left ``running`` as ``interrupted``), loads the
engine (``runtime.AsyncLLM``) and the index.  The embedder-backed long-term
memory loads on first use (it costs seconds and many servers never use it), once.
``Services.stop`` drains: it waits until in-flight HTTP requests end (at most
``drain_timeout_s``), then shuts the engine down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loom.api.metrics import Metrics
from loom.api.settings import Settings
from loom.api.store import Store
from loom.json_types import JSONObject

if TYPE_CHECKING:  # loaded by start() and on first use: seconds of imports a bare app never needs
    from loom.memory import LongTermMemory
    from loom.orchestrator.formats import ToolCallFormat
    from loom.orchestrator.reuse import GeneratedIds
    from loom.retrieval import Embedder, Retriever
    from loom.runtime import AsyncLLM
    from loom.tools.mcp import MCPServer, MCPTool

log = logging.getLogger(__name__)


def engine_args(settings: Settings) -> JSONObject:
    """``EngineConfig`` keyword arguments from the settings (unset ones left to the engine).

    Every engine flag of ``loom serve`` (vLLM's names) lands in the field of the
    same name; ``speculative_config`` goes as a dict of
    ``loom.runtime.spec_decode.SpeculativeConfig`` fields.
    """
    args: JSONObject = {
        "dtype": settings.dtype,
        "device": settings.device,
        "block_size": settings.block_size,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "kv_retention_max_ttl_s": settings.kv_retention_max_ttl_s,
        "kv_retention_max_fraction": settings.kv_retention_max_fraction,
        "kv_tier_bytes": settings.kv_tier_bytes,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "seed": settings.seed,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "quantization": settings.quantization,
    }
    for name in ("num_kv_blocks", "max_model_len", "max_waiting", "speculative_config", "kv_tier_dir"):
        value = getattr(settings, name)
        if value is not None:
            args[name] = value
    return args


OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass
class Services:
    """Per-process state shared by every route (``request.app.state.services``)."""

    settings: Settings
    store: Store | None = None
    engine: AsyncLLM | None = None
    tool_format: ToolCallFormat | None = None  # of the served model
    default_sampling: dict[str, float | int] = field(default_factory=dict)  # Settings.generation_config's
    generated_ids: GeneratedIds | None = None  # exact ids for resent replies
    retriever: Retriever | None = None
    metrics: Metrics = field(default_factory=Metrics)
    started_at: float = field(default_factory=time.time)
    in_flight: int = 0
    _memory: LongTermMemory | None = None
    _mcp: dict[str, MCPServer] | None = None  # by name (Settings.mcp_config)
    _embedder: Embedder | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)  # re-entrant: index() loads the embedder

    def __post_init__(self) -> None:
        self.metrics.model_name = self.settings.model_name  # vLLM's model_name label

    # MCP servers (loom.tools.mcp) ------------------------------------------------------------
    def _mcp_servers(self) -> dict[str, MCPServer]:
        with self._lock:
            if self._mcp is None:
                from loom.tools.mcp_config import load_mcp_config

                path = self.settings.mcp_config
                self._mcp = {s.name: s for s in load_mcp_config(path)} if path is not None else {}
            return self._mcp

    def _mcp_refs(self, names: list[str]) -> list[tuple[str, str, MCPServer | None]]:
        """``(server name, tool name or "", server or None)`` of each ``mcp:<server>[/<tool>]`` name."""
        servers = self._mcp_servers()
        refs = [ref[4:].partition("/") for ref in names if ref.startswith("mcp:")]
        return [(server, tool, servers.get(server)) for server, _, tool in refs]

    def mcp_tools(self, names: list[str]) -> list[MCPTool]:
        """The MCP tools a session's ``tools`` list names (``mcp:<server>``, ``mcp:<server>/<tool>``).

        A server is listed on first use (blocking, at most its ``connect_timeout_s``); later
        turns reuse that listing, so the rendered tool schemas (the cached prefix) stay the
        same while the server restarts.  A server that cannot be reached and was never listed
        is left out of the turn with a warning; its calls would fail anyway, and the turn
        goes on with the other tools.
        """
        from loom.tools.mcp import MCPConnectionError

        chosen: dict[str, MCPTool] = {}
        for server_name, tool_name, server in self._mcp_refs(names):
            if server is None:
                continue  # checked when the session was created; the config changed since
            listed = server.cached_tools
            if listed is None:
                try:
                    listed = server.tools()
                except MCPConnectionError as exc:
                    log.warning("MCP server %r left out of this turn: %s", server_name, exc)
                    continue
            for t in listed:
                if not tool_name or t.remote_name == tool_name:
                    chosen[t.name] = t
        return [chosen[n] for n in sorted(chosen)]

    def check_mcp_names(self, names: list[str]) -> None:
        """Refuse ``mcp:`` tool names of no configured server (or no such tool of a listed server).

        Raises:
            InvalidRequestError: naming ``tools``.
        """
        from loom.runtime.errors import InvalidRequestError

        for server_name, tool_name, server in self._mcp_refs(names):
            if server is None:
                known = ", ".join(sorted(self._mcp_servers())) or "none (loom serve --mcp-config)"
                raise InvalidRequestError(f"tools: no MCP server named {server_name!r}; configured: {known}",
                                          param="tools")
            listed = server.cached_tools
            if tool_name and listed is not None and tool_name not in {t.remote_name for t in listed}:
                raise InvalidRequestError(f"tools: MCP server {server_name!r} has no tool {tool_name!r}",
                                          param="tools")

    # lifecycle --------------------------------------------------------------------
    # ``store``, ``engine`` and ``tool_format`` stay ``None`` until ``start`` sets them (``loom serve``
    # reads which one is missing after a failed start); request handlers, which run only after it,
    # take them typed through these.
    def require_store(self) -> Store:
        """The database, once ``start`` opened it.

        Raises:
            RuntimeError: ``start`` has not run.
        """
        if self.store is None:
            raise RuntimeError("Services.start() has not run: no database")
        return self.store

    def require_engine(self) -> AsyncLLM:
        """The engine, once ``start`` loaded it.

        Raises:
            RuntimeError: ``start`` has not run.
        """
        if self.engine is None:
            raise RuntimeError("Services.start() has not run: no engine")
        return self.engine

    def require_generated_ids(self) -> GeneratedIds:
        """The remembered generated ids (made with the engine).

        Raises:
            RuntimeError: ``start`` has not run.
        """
        if self.generated_ids is None:
            raise RuntimeError("Services.start() has not run: no generated ids")
        return self.generated_ids

    def traces_wanted(self) -> bool:
        """Whether spans are to be exported: ``otlp_traces_endpoint`` or a standard ``OTEL_EXPORTER_OTLP_*``
        endpoint variable is set."""
        return bool(self.settings.otlp_traces_endpoint or any(os.environ.get(v) for v in OTLP_ENDPOINT_VARIABLES))

    def start(self) -> None:
        """Open the database, load the engine and the index (blocking, seconds); once.

        ``loom serve`` calls it before uvicorn starts, so a model that cannot be
        loaded is one error line rather than a failed ASGI lifespan; the app's
        lifespan calls it again, which does nothing then.

        Raises:
            loom.runtime.errors.LoomError, ValueError, OSError: the model, database or index cannot be opened.
        """
        from loom.runtime import AsyncLLM

        if self.engine is not None:
            return
        s = self.settings
        if self.traces_wanted():
            from loom.orchestrator.tracing import configure_otlp

            configure_otlp(s.otlp_traces_endpoint)  # before the engine loads (``loom serve`` did it already)
        for server in self._mcp_servers().values():  # a bad --mcp-config fails the start, before the model loads
            server.connect_in_background()  # listed while the model loads; sessions never wait on a cold start
        self.store = Store(s.db)
        stale = self.store.interrupt_running_turns()
        if stale:
            log.warning("marked %d turn(s) left running by a previous process as interrupted", stale)
        log.info("loading model %s", s.model)
        self.engine = AsyncLLM(s.model, **engine_args(s))
        from loom.orchestrator.formats import detect_format

        self.tool_format = detect_format(self.engine.tokenizer, s.tool_call_parser)
        from loom.runtime.checkpoint.generation_config import default_sampling

        self.default_sampling = default_sampling(self.engine.engine.model_path, s.generation_config)
        if self.default_sampling:
            log.info("default sampling parameters from the model's generation config: %s", self.default_sampling)
        log.info("tool-call format: %s%s", self.tool_format.name,
                 " (tools described in the system message)" if self.tool_format.tools_in_system else "")
        self.metrics.watch_engine(self.engine.stats)
        from loom.orchestrator.reuse import GeneratedIds

        self.generated_ids = GeneratedIds(self.engine.tokenizer)
        if s.index is not None:
            self.retriever = self._open_index(Path(s.index))
        if s.no_auth:
            log.warning(
                "AUTHENTICATION DISABLED (--no-auth): every request runs as owner 'local'. "
                "Use this for local development only."
            )

    async def stop(self) -> None:
        """Drain in-flight requests (up to ``drain_timeout_s``), then stop the engine and close the database
        connections (store, memory, sessions), so a SQLite database is left without ``-wal`` / ``-shm`` files."""
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while self.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.in_flight:
            log.warning("shutting down with %d request(s) still in flight", self.in_flight)
        if self.engine is not None:
            self.engine.shutdown()
        for server in (self._mcp or {}).values():
            await asyncio.to_thread(server.close)
        if self._memory is not None:
            self._memory.close()
        if self.store is not None:
            self.store.close()
        from loom.orchestrator.session import dispose_engines

        dispose_engines()  # the sessions' connections: uvicorn re-raises SIGTERM after this, so atexit never runs

    # lazily loaded parts ------------------------------------------------------------
    def embedder(self) -> Embedder:
        """The MiniLM sentence embedder shared by index and memory (loaded once)."""
        with self._lock:
            if self._embedder is None:
                from loom.retrieval import Embedder

                self._embedder = Embedder()
            return self._embedder

    def memory(self) -> LongTermMemory:
        """``memory.LongTermMemory`` on the server database (created on first use)."""
        if self._memory is None:
            embedder = self.embedder()
            with self._lock:
                if self._memory is None:
                    from loom.memory import LongTermMemory

                    from loom.api.owners import split_memory_owners

                    memory = LongTermMemory(url=self.settings.db, embedder=embedder)
                    split_memory_owners(memory.engine)  # a database of a server before owner columns
                    self._memory = memory
        return self._memory

    def index(self) -> Retriever:
        """The retriever; without ``--index`` one is created under ``.loom/index``."""
        if self.retriever is None:
            with self._lock:
                if self.retriever is None:
                    self.retriever = self._open_index(Path(".loom/index"))
        return self.retriever

    def _open_index(self, path: Path) -> Retriever:
        from loom.retrieval import Retriever

        log.info("opening index %s", path)
        return Retriever.open(path, create=True, embedder=self.embedder())
