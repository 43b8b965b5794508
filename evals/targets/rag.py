"""``rag`` target: multi-turn agentic sessions through ``orchestrator.Agent``.

Each conversation is one agent session (``InMemorySession``) over an
in-process ``AsyncLLM``, with retrieval over the ingested stdlib docs
(``retrieval.Retriever``, MiniLM + FAISS), long-term memory
(``memory.LongTermMemory`` in a SQLite file of the run) and tools
(``calculator``, ``remember``, ``recall``).  One record per user turn: TTFT
is the first streamed event (reasoning, content or tool-call text) of the
turn's first model call, E2EL the end of the turn (tool calls and every
model call included), and the classes are the agent's own ledger summed
over the turn's calls (``system, tools, memory, history, retrieval,
tool_result, user`` / ``reasoning, tool_call, output``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from loom.evals.metrics import Chunk
from loom.evals.records import Outcome, make_record
from loom.evals.targets.base import RunContext
from loom.evals.targets.inproc import InprocTarget
from loom.evals.workloads import Conversation
from loom.json_types import JSONObject

logger = logging.getLogger(__name__)

NAMESPACE_PREFIX = "eval"


def corpus_index(corpus: str, index_dir: str | Path | None = None) -> Any:
    """The retriever over ``corpus`` (comma-separated ``Retriever.ingest`` paths), ingested once.

    ``index_dir`` defaults to ``$LOOM_CACHE/evals/rag-<hash of corpus>`` (else
    ``~/.cache/loom/...``), so different corpora never share an index.
    """
    return open_corpus_index(corpus, index_dir)[0]


def open_corpus_index(corpus: str, index_dir: str | Path | None = None) -> tuple[Any, JSONObject]:
    """:func:`corpus_index` plus what it took: ``corpus``, ``index_dir``, ``chunks``,
    ``ingested`` (False: an earlier run's index was reused) and ``seconds`` (wall time).

    Raises:
        ValueError: an empty corpus.
    """
    import hashlib
    import os

    from loom.retrieval import Retriever

    t0 = time.perf_counter()
    paths = [p.strip() for p in corpus.split(",") if p.strip()]
    if not paths:
        raise ValueError("option corpus: give at least one path (e.g. stdlib:module/json)")
    if not index_dir:
        root = Path(os.environ.get("LOOM_CACHE") or Path.home() / ".cache" / "loom")
        index_dir = root / "evals" / f"rag-{hashlib.sha256(','.join(paths).encode()).hexdigest()[:12]}"
    retriever = Retriever.open(index_dir)
    ingested = len(retriever) == 0
    if ingested:
        logger.info("ingesting %s into %s (once)", ", ".join(paths), index_dir)
        retriever.ingest(paths, show_progress=False)
    info = {"corpus": corpus, "index_dir": str(index_dir), "chunks": len(retriever), "ingested": ingested,
            "seconds": time.perf_counter() - t0}
    return retriever, info


class RagTarget(InprocTarget):
    """An ``Agent`` per conversation over one engine, retriever and memory.

    Args:
        llm: started ``runtime.AsyncLLM``.
        retriever: ``retrieval.Retriever``.
        memory_url: SQLAlchemy URL of the long-term memory.
        budget: ``orchestrator.ContextBudget`` settings (field -> value).
        max_steps: model calls per turn at most.
    """

    name = "rag"

    def __init__(self, llm: Any, retriever: Any, memory_url: str, budget: JSONObject | None = None,
                 max_steps: int = 3) -> None:
        from loom.memory import LongTermMemory

        super().__init__(llm)
        self.retriever = retriever
        self.memory = LongTermMemory(memory_url, embedder=getattr(retriever, "embedder", None))
        self.budget = dict(budget or {})
        self.max_steps = max_steps

    def _agent(self, conv: Conversation, max_tokens: int) -> Any:
        from loom.orchestrator import Agent, ContextBudget
        from loom.runtime import SamplingParams
        from loom.tools.builtin import calculator, memory_tools

        ns = f"{NAMESPACE_PREFIX}-{conv.id}"
        self.memory.forget(ns)
        budget = ContextBudget(**{"reserved_output": max_tokens, "max_retrieval_tokens": 384, **self.budget})
        return Agent(self.llm, tools=[calculator, *memory_tools(self.memory, ns)], retriever=self.retriever,
                     memory=self.memory, memory_namespace=ns, system_prompt=conv.system, budget=budget,
                     max_steps=self.max_steps, retrieval_k=2,
                     sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens))

    @property
    def can_force_tools(self) -> bool:
        """Whether the engine has a structured-output backend (forced tool calls need one)."""
        return bool(getattr(getattr(self.llm, "engine", None), "logits_processors", None))

    async def conversation(self, conv: Conversation, ctx: RunContext) -> None:
        from loom.orchestrator import InMemorySession

        agent = self._agent(conv, conv.turns[0].max_tokens if conv.turns else 16)
        session = InMemorySession()
        for t, turn in enumerate(conv.turns):
            choice = turn.tool_choice
            if choice == "required" and not self.can_force_tools:
                if not getattr(self, "_warned", False):
                    logger.warning("engine has no structured-output backend: forced tool calls fall back to "
                                   "tool_choice='auto' (a random-weight model then rarely calls tools)")
                    self._warned = True
                choice = "auto"
            out, result = await agent_turn(agent, session, turn.user, choice)
            out.extra["tool_choice_sent"] = choice
            ledger = result.usage if result is not None else None
            ctx.emit(make_record(out, [], ctx.prices, ctx.t0, ledger=ledger, variant=ctx.variant,
                                 conversation=conv.id, turn=t, request_id=f"{ctx.variant}-{conv.id}-t{t}",
                                 max_tokens=turn.max_tokens, tool_choice=turn.tool_choice))
            if out.error is not None:
                return


async def agent_turn(agent: Any, session: Any, message: str, choice: Any) -> tuple[Outcome, Any]:
    """Run one ``agent.stream`` turn; return the observed :class:`Outcome` and the ``RunResult``
    (``None`` when the turn raised before finishing: the outcome then carries the error)."""
    from loom.orchestrator.events import ContentDelta, DoneEvent, ReasoningDelta, ToolCallEvent

    out = Outcome(send_time=time.monotonic())
    result = None
    try:
        async for ev in agent.stream(message, session=session, tool_choice=choice):
            now = time.monotonic()
            if isinstance(ev, ReasoningDelta) and ev.text:
                out.chunks.append(Chunk(now, 1, False))
            elif isinstance(ev, ContentDelta) and ev.text:
                out.chunks.append(Chunk(now, 1, True))
            elif isinstance(ev, ToolCallEvent) and (ev.arguments_delta or ev.name):
                out.chunks.append(Chunk(now, 1, True))
            elif isinstance(ev, DoneEvent):
                result = ev.result
    except Exception as exc:  # noqa: BLE001 - one failed turn is recorded, the run goes on
        logger.warning("agent turn failed: %s", exc)
        out.error = f"{type(exc).__name__}: {exc}"
    if result is not None:
        fill_result(out, result)
    return out, result


def fill_result(out: Outcome, result: Any) -> None:
    """Copy a ``RunResult``'s usage, answer and tool calls into ``out``."""
    usage = result.usage
    out.prompt_tokens, out.cached_tokens = usage.prompt_tokens, usage.cached_tokens
    out.output_ids = [0] * usage.completion_tokens  # counted by the ledger; ids are per call
    out.text = result.answer
    out.finish_reason = result.final_state
    if result.final_state == "error":
        out.error = result.error or "agent error"
    out.extra = {**out.extra, "steps": result.steps, "final_state": result.final_state,
                 "tool_calls": [c.name for c in result.tool_calls],
                 "tool_errors": sum(1 for r in result.tool_results if r.is_error),
                 "timings_ms": dict(result.timings), "spec_rejected": usage.spec_rejected}
