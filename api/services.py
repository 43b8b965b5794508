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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api.metrics import Metrics
from api.settings import Settings
from api.store import Store

log = logging.getLogger(__name__)


def engine_args(settings: Settings) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments from the settings (unset ones left to the engine).

    Every engine flag of ``loom serve`` (vLLM's names) lands in the field of the
    same name; ``speculative_config`` goes as a dict of
    ``runtime.spec.SpeculativeConfig`` fields.
    """
    args: dict[str, Any] = {
        "dtype": settings.dtype,
        "device": settings.device,
        "block_size": settings.block_size,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "seed": settings.seed,
    }
    for name in ("num_kv_blocks", "max_model_len", "max_waiting", "speculative_config"):
        value = getattr(settings, name)
        if value is not None:
            args[name] = value
    return args


@dataclass
class Services:
    """Per-process state shared by every route (``request.app.state.services``)."""

    settings: Settings
    store: Store | None = None
    engine: Any = None  # runtime.AsyncLLM
    tool_format: Any = None  # orchestrator.formats.ToolCallFormat of the served model
    generated_ids: Any = None  # orchestrator.reuse.GeneratedIds: exact ids for resent replies
    retriever: Any = None  # retrieval.Retriever
    metrics: Metrics = field(default_factory=Metrics)
    started_at: float = field(default_factory=time.time)
    in_flight: int = 0
    _memory: Any = None
    _embedder: Any = None
    _lock: Any = field(default_factory=threading.RLock)  # re-entrant: index() loads the embedder

    def __post_init__(self) -> None:
        self.metrics.model_name = self.settings.model_name  # vLLM's model_name label

    def mcp_tools(self, names: list[str]) -> list[Any]:
        """Tools of the configured MCP servers that a session's ``tools`` list names (none yet)."""
        return []

    def check_mcp_names(self, names: list[str]) -> None:
        """Raise ``InvalidRequestError`` (param ``tools``) for an ``mcp:`` name no configured server has."""
        bad = [n for n in names if n.startswith("mcp:")]
        if bad:
            from runtime.errors import InvalidRequestError

            raise InvalidRequestError(f"tools: no MCP server configured for {bad[0]!r}", param="tools")

    # lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Open the database, load the engine and the index (blocking, seconds); once.

        ``loom serve`` calls it before uvicorn starts, so a model that cannot be
        loaded is one error line rather than a failed ASGI lifespan; the app's
        lifespan calls it again, which does nothing then.

        Raises:
            runtime.errors.LoomError, ValueError, OSError: the model, database or index cannot be opened.
        """
        from runtime import AsyncLLM

        if self.engine is not None:
            return
        s = self.settings
        self.store = Store(s.db)
        stale = self.store.interrupt_running_turns()
        if stale:
            log.warning("marked %d turn(s) left running by a previous process as interrupted", stale)
        log.info("loading model %s", s.model)
        self.engine = AsyncLLM(s.model, **engine_args(s))
        from orchestrator.formats import detect_format

        self.tool_format = detect_format(self.engine.tokenizer, s.tool_call_parser)
        log.info("tool-call format: %s%s", self.tool_format.name,
                 " (tools described in the system message)" if self.tool_format.tools_in_system else "")
        self.metrics.watch_engine(self.engine.stats)
        from orchestrator.reuse import GeneratedIds

        self.generated_ids = GeneratedIds(self.engine.tokenizer)
        if s.index is not None:
            self.retriever = self._open_index(Path(s.index))
        if s.no_auth:
            log.warning(
                "AUTHENTICATION DISABLED (--no-auth): every request runs as owner 'local'. "
                "Use this for local development only."
            )

    async def stop(self) -> None:
        """Drain in-flight requests (up to ``drain_timeout_s``), then stop the engine."""
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while self.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.in_flight:
            log.warning("shutting down with %d request(s) still in flight", self.in_flight)
        if self.engine is not None:
            self.engine.shutdown()
        if self.store is not None:
            self.store.close()

    # lazily loaded parts ------------------------------------------------------------
    def embedder(self) -> Any:
        """The MiniLM sentence embedder shared by index and memory (loaded once)."""
        with self._lock:
            if self._embedder is None:
                from retrieval import Embedder

                self._embedder = Embedder()
            return self._embedder

    def memory(self) -> Any:
        """``memory.LongTermMemory`` on the server database (created on first use)."""
        if self._memory is None:
            embedder = self.embedder()
            with self._lock:
                if self._memory is None:
                    from memory import LongTermMemory

                    self._memory = LongTermMemory(url=self.settings.db, embedder=embedder)
        return self._memory

    def index(self) -> Any:
        """The retriever; without ``--index`` one is created under ``.loom/index``."""
        if self.retriever is None:
            with self._lock:
                if self.retriever is None:
                    self.retriever = self._open_index(Path(".loom/index"))
        return self.retriever

    def _open_index(self, path: Path) -> Any:
        from retrieval import Retriever

        log.info("opening index %s", path)
        return Retriever.open(path, create=True, embedder=self.embedder())
