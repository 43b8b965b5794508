"""Running one session turn: an ``orchestrator.Agent`` over the shared engine.

The agent is rebuilt per turn from the session's stored configuration (cheap:
it holds no state of its own); the conversation lives in the orchestrator's
``SQLSession`` on the server database, keyed by the session id, so a restarted
server continues it and the rendered prefix is token-identical (prefix-cache
hits).  The turn row is committed before the agent runs; its outcome (answer,
reasoning, tool calls and results, OpenAI usage, full ledger) is written when
the agent finishes, or ``interrupted`` when the client goes away, which also
closes the agent's stream and so aborts the engine request.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator, Iterable
from typing import TYPE_CHECKING, Any

from loom.api.cache_scope import cache_salt
from loom.api.engine_io import engine_max_model_len
from loom.api.schemas.chat import NamedToolChoice
from loom.api.schemas.sessions import SessionCreate, SessionSampling, TurnOut, TurnRetrieval
from loom.api.services import Services
from loom.api.store import Turn
from loom.orchestrator.events import AgentEvent, DoneEvent, RunResult, UsageEvent
from loom.orchestrator.items import JSON

if TYPE_CHECKING:  # the orchestrator's agent and sessions load on a session's first turn
    from loom.orchestrator import Agent, SQLSession
    from loom.orchestrator.ledger import Ledger
    from loom.orchestrator.session import Session
    from loom.retrieval import Hit, Retriever
    from loom.runtime import SamplingParams
    from loom.tools.base import Tool

log = logging.getLogger(__name__)


class OwnerRetriever:
    """A retriever view that finds the owner's documents and the shared ones (metadata filter).

    A document posted to ``/v1/documents`` carries ``metadata.owner`` and only its owner finds it;
    a document the operator ingested into the server's index with ``loom ingest`` carries no owner
    and is *shared*: every caller's search and sessions find it, and no caller can delete it.
    """

    def __init__(self, retriever: Retriever, owner: str) -> None:
        self._retriever = retriever
        self.owner = owner

    @property
    def _visible(self) -> dict[str, JSON]:
        return {"owner": [self.owner, None]}  # None: no owner, an operator's shared document

    def search(self, query: str, k: int = 5, filters: dict[str, JSON] | None = None) -> list[Hit]:
        """``Retriever.search`` restricted to the owner's and the shared documents."""
        return self._retriever.search(query, k=k, filters={**(filters or {}), **self._visible})

    def search_many(self, queries: Iterable[str], k: int = 5, filters: dict[str, JSON] | None = None,
                    identifier_queries: Iterable[str] | None = None) -> list[Hit]:
        """``Retriever.search_many`` restricted to the owner's and the shared documents."""
        return self._retriever.search_many(queries, k=k, filters={**(filters or {}), **self._visible},
                                           identifier_queries=identifier_queries)

    def owns(self, document: str) -> bool:
        """Whether ``document`` (its index id) is one of the owner's own (not a shared one, not another's)."""
        return bool(self._retriever.store.filter_faiss_ids({"document": document, "owner": self.owner}))

    def __getattr__(self, name: str) -> Any:  # any other attribute of the wrapped retriever
        if name.startswith("search"):  # never an unfiltered search through the view
            raise AttributeError(name)
        return getattr(self._retriever, name)


def _tools(services: Services, owner: str, cfg: SessionCreate) -> list[Tool]:
    from loom.orchestrator.relevance import search_tool
    from loom.tools.builtin import calculator, memory_tools

    chosen: list[Tool] = []
    if "calculator" in cfg.tools:
        chosen.append(calculator)
    if "search_documents" in cfg.tools:
        chosen.append(search_tool(OwnerRetriever(services.index(), owner)))
    wanted = {"remember", "recall"} & set(cfg.tools)
    if wanted:
        memory = services.memory().for_owner(owner)
        chosen += [t for t in memory_tools(memory, cfg.memory_namespace or "default") if t.name in wanted]
    chosen += services.mcp_tools(list(cfg.tools))
    from loom.tools.client_tool import ClientTool

    chosen += [ClientTool(t.function.name, t.function.description or "", t.function.parameters)
               for t in cfg.client_tools]
    return chosen


def tool_choice_arg(choice: str | NamedToolChoice) -> str:
    """A session tool choice as ``Agent`` takes it (a named choice becomes the tool name)."""
    if isinstance(choice, str):
        return choice
    return choice.function.name  # named tool


def check_budget(services: Services, cfg: SessionCreate) -> None:
    """Refuse a session whose ``sampling.max_tokens`` leaves no room for a prompt in the window.

    Raises:
        InvalidRequestError: naming ``sampling.max_tokens`` (every turn would fail otherwise).
    """
    from loom.orchestrator import ContextBudget
    from loom.runtime.errors import InvalidRequestError

    window = engine_max_model_len(services.require_engine())
    try:
        ContextBudget(reserved_output=cfg.sampling.max_tokens, max_model_len=window)
    except InvalidRequestError:
        raise InvalidRequestError(
            f"sampling.max_tokens: {cfg.sampling.max_tokens} output tokens leave no room for a prompt in "
            f"the model's {window}-token window", param="sampling.max_tokens") from None


def session_sampling_params(s: SessionSampling) -> SamplingParams:
    """The engine's ``SamplingParams`` of a session's ``sampling`` (the same names, field for field)."""
    from loom.runtime import SamplingParams

    return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                          repetition_penalty=s.repetition_penalty, frequency_penalty=s.frequency_penalty,
                          presence_penalty=s.presence_penalty, max_tokens=s.max_tokens, seed=s.seed,
                          stop=list(s.stop))


def build_agent(services: Services, owner: str, cfg: SessionCreate) -> Agent:
    """An ``orchestrator.Agent`` for one turn of a session with config ``cfg``."""
    from loom.orchestrator import Agent, ContextBudget

    s = cfg.sampling
    sampling = session_sampling_params(s)
    ns = cfg.memory_namespace
    return Agent(
        services.require_engine(),
        budget=ContextBudget(reserved_output=s.max_tokens, max_history_tokens=cfg.max_history_tokens),
        tool_timeout_s=services.settings.tool_timeout_s,
        tools=_tools(services, owner, cfg),
        retriever=OwnerRetriever(services.index(), owner) if cfg.index else None,
        memory=services.memory().for_owner(owner) if ns else None,  # owners never see each other's memories
        memory_namespace=ns or None,
        system_prompt=cfg.system_prompt,
        max_steps=cfg.max_steps or services.settings.max_steps,
        sampling=sampling,
        tool_choice=tool_choice_arg(cfg.tool_choice),
        auto_retrieve=cfg.index,
        condense_question=cfg.condense_question,
        similarity_cutoff=cfg.similarity_cutoff,
        no_match_answer=cfg.no_match_answer if cfg.index else None,
        first_answer_k=cfg.first_answer_k,
        attribution_k=cfg.attribution_k,
        tool_call_parser=services.tool_format,
        approval=cfg.approval,
        cache_salt=cache_salt(services.settings.prefix_cache_scope, owner),
        cache_ttl_s=cfg.cache_control.ttl_s if cfg.cache_control is not None else None,
    )


def agent_session(services: Services, session_id: str) -> SQLSession:
    """The orchestrator's SQL-backed conversation items of ``session_id``."""
    from loom.orchestrator import SQLSession

    return SQLSession(session_id, url=services.settings.db)


def turn_out(turn: Turn) -> TurnOut:
    """API view of a stored turn."""
    return TurnOut(session_id=turn.session_id, index=turn.index, user_message=turn.user_message,
                   state=turn.state, answer=turn.answer, reasoning=turn.reasoning,
                   tool_calls=turn.tool_calls or [], tool_results=turn.tool_results or [],
                   usage=turn.usage, ledger=turn.ledger, error=turn.error, finish_reason=turn.finish_reason,
                   retrieval=TurnRetrieval.model_validate(turn.retrieval) if turn.retrieval else None,
                   created_at=turn.created_at, finished_at=turn.finished_at)


def _jsonable(value: object) -> JSON:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def result_fields(result: RunResult) -> dict[str, JSON]:
    """Columns of a finished turn from its ``RunResult`` (``Store.finish_turn`` keywords)."""
    ledger = result.usage
    return {
        "state": result.final_state,
        "finish_reason": result.finish_reason,
        "answer": result.answer,
        "reasoning": result.reasoning or None,
        "tool_calls": _jsonable(result.tool_calls),
        "tool_results": _jsonable(result.tool_results),
        "usage": ledger.to_openai_usage(),
        "ledger": ledger.to_dict(with_calls=True),
        "retrieval": retrieval_field(result),
    }


def retrieval_field(result: RunResult) -> dict[str, JSON] | None:
    """The stored ``retrieval`` of a turn: the sections shown, then those found after the answer that state
    its names (each once, in rank order; ``RunResult.attributed``, also listed alone), whether nothing in the
    index was related (``RunResult.no_match``), the query a follow-up was searched with, why an answer was
    replaced by the session's ``no_match_answer`` (``RunResult.unsupported``, ``RunResult.unknown_terms``)
    and whether the answer was made again from every related section (``RunResult.widened``); ``None`` when
    it searched nothing."""
    from loom.orchestrator.items import source_label

    if not result.retrieved and not result.no_match:
        return None
    return {"sources": list(dict.fromkeys(source_label(h) for h in result.retrieved)), "no_match": result.no_match,
            "searched_as": result.rewritten_query, "unsupported": list(result.unsupported),
            "unknown_terms": list(result.unknown_terms), "widened": result.widened,
            "attributed": list(dict.fromkeys(source_label(h) for h in result.attributed))}


def after_turn_ledger(result: RunResult) -> dict[str, JSON] | None:
    """The turn's stored ledger with ``after_turn`` added: the calls the agent made after the
    answer for the next turn (``RunResult.after_turn_usage``); ``None`` when there were none."""
    after = result.after_turn_usage
    if after is None:
        return None
    return {**result.usage.to_dict(with_calls=True), "after_turn": after.to_dict(with_calls=True)}


def record_metrics(services: Services, ledger: Ledger | None) -> None:
    """Tokens by class, vLLM's token counters and per-call TTFT / E2EL from a run's ledger."""
    if ledger is None:
        return
    counts: dict[str, int] = {}
    for name, u in ledger.prompt.items():
        counts[f"{name}.cached"] = u.cached_tokens
        counts[f"{name}.computed"] = u.computed_tokens
    for name, o in ledger.output.items():
        counts[name] = o.tokens
    counts["spec_rejected"] = ledger.spec_rejected
    services.metrics.count_tokens(counts)
    for call in ledger.calls:
        services.metrics.observe_call_tokens(call.prompt_tokens, call.completion_tokens)
        if call.ttft_ms:
            services.metrics.ttft.observe(call.ttft_ms / 1000.0)
        if call.e2e_ms:
            services.metrics.e2el.observe(call.e2e_ms / 1000.0)


def event_json(ev: AgentEvent) -> dict[str, JSON]:
    """One agent event as JSON for the SSE stream (``type`` plus its fields)."""
    if isinstance(ev, UsageEvent):
        return {"type": ev.type, "usage": ev.ledger.to_openai_usage(), "ledger": ev.ledger.to_dict()}
    if isinstance(ev, DoneEvent):
        return {"type": ev.type}  # the stored turn follows as a `turn` event
    data: dict[str, JSON] = _jsonable(ev)
    data["type"] = ev.type
    return data


def agent_events(agent: Agent, message: str, session: Session,
                 tool_choice: str | None) -> AsyncGenerator[AgentEvent, None]:
    """The agent's event stream for one turn (``Agent.stream``; ``aclose()`` aborts it)."""
    return agent.stream(message, session=session, tool_choice=tool_choice)
