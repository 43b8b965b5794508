"""``Agent``: the reasoning / tool-call loop over the in-process engine.

One user turn (:meth:`Agent.stream`):

1. load the session's items; at the first turn take the memory snapshot;
2. retrieve (``auto_retrieve``) and look up new memories, render them with the
   user message as this turn's tail items and store them;
3. loop up to ``max_steps`` model calls: compact the view if the history
   outgrew its cap, assemble the prompt from stored ids
   (:class:`~loom.orchestrator.context.ContextBuilder`), stream the reply through
   the parser, store the reply's exact ids, run every tool call of the reply
   concurrently (``asyncio.gather``; errors and timeouts come back as error
   results), store the results as one group, and go on; a reply without tool
   calls ends the turn;
4. write the user message back to long-term memory.

``tool_choice``: ``"auto"``, ``"none"`` (tool-call text stays content),
``"required"`` or a tool name / OpenAI ``{"type": "function", "function":
{"name": ...}}``.  Required and named calls are forced with constrained
decoding (a Lark grammar over ``tool_call_schema``) on the turn's first call,
then the loop goes back to ``"auto"`` (as openai-agents' ``reset_tool_choice``)
so it cannot loop forever on forced calls.

Errors before the first model call (bad input, a prompt that cannot fit)
raise; after it, the turn ends with ``final_state="error"`` and everything
produced so far is kept in the session and the result.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any

from loom.runtime.errors import InvalidRequestError, LoomError
from loom.orchestrator.retention import RetentionPolicy
from loom.runtime.sampling_params import SamplingParams

from loom.orchestrator import compaction_hooks
from loom.orchestrator.answer_verifier import AnswerVerifier
from loom.orchestrator.approval import pending_approval
from loom.orchestrator.budget import ContextBudget
from loom.orchestrator.condense import DEFAULT_CONDENSE_TOKENS, condense_mode
from loom.orchestrator.context import ContextBuilder
from loom.orchestrator.engine_client import EngineClient
from loom.orchestrator.events import AgentEvent, DoneEvent, RunResult, ToolChoice, UsageEvent
from loom.orchestrator.formats import ToolCallFormat
from loom.orchestrator.items import JSON
from loom.orchestrator.ledger import Ledger, PriceTable
from loom.orchestrator.parts import DEFAULT_ATTRIBUTION_K, AgentParts
from loom.orchestrator.protocols import Engine, Memory, Retriever, Tokenizer, eos_token_ids
from loom.orchestrator.relevance import resolve_cutoff, search_tool
from loom.orchestrator.runner import TurnRunner
from loom.orchestrator.session import InMemorySession, Session
from loom.tools import ToolRegistry
from loom.tools.builtin.search import SEARCH_TOOL_NAME

logger = logging.getLogger(__name__)

# Earlier turns' reasoning leaves the prompt only when a compaction rebuilds the view (everything after
# the cut is prefilled again then, so dropping it costs no cache hit); between compactions the prompt
# is append-only whatever this says. False: compactions free the window that old reasoning took.
DEFAULT_KEEP_REASONING = False

ToolChoiceArg = str | Mapping[str, Any]
"""A tool choice as callers give it: ``"auto"``, ``"none"``, ``"required"``, a tool name, ``{"name": ...}``
or OpenAI's ``{"type": "function", "function": {"name": ...}}`` (JSON, checked by ``check_tool_choice``)."""


def _registry(tools: Any, retriever: Retriever | None, auto_retrieve: bool, timeout_s: float,
              cutoff: float | None) -> ToolRegistry:
    reg = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools or (), default_timeout_s=timeout_s)
    if retriever is not None and not auto_retrieve and SEARCH_TOOL_NAME not in reg:
        reg.register(search_tool(retriever, cutoff))
    return reg


class Agent:
    """An agent over an in-process engine with tools, retrieval and memory.

    Args:
        llm: ``runtime.AsyncLLM`` (streams) or ``runtime.LLM`` (wrapped).
        tools: tools (anything ``tools.ToolRegistry`` accepts) or a registry.
        retriever: ``retrieval.Retriever`` (``search(query, k)``; ``search_many(queries, k)``
            when present fuses a rewritten follow-up with the message) or ``None``.
        memory: ``memory.LongTermMemory`` or ``None``.
        system_prompt: system message (the cached prefix; keep it fixed).
        budget: :class:`ContextBudget` (window defaults to the engine's).
        max_steps: model calls per turn at most; once a tool has run, the last one
            must answer (an answer step, :mod:`loom.orchestrator.runner`).
        sampling: base ``SamplingParams`` (default greedy); ``max_tokens`` comes
            from the budget.
        tool_choice: default tool choice (see the module docstring).
        auto_retrieve: retrieve before the first call of each turn; when False
            and a retriever is given, a ``search_documents`` tool is added.
        keep_reasoning: keep earlier turns' reasoning when a compaction rebuilds the
            view (default False: from the next compaction on, earlier turns are shown
            without their ``<think>`` block). Between compactions every prompt
            extends the previous one token for token, reasoning included, so the
            prefix cache serves it whatever this says.
        memory_namespace: namespace for memory reads and write-back.
        prices: :class:`PriceTable` for ledger costs.
        retrieval_k: retrieved chunks to fetch per turn.
        similarity_cutoff: the cosine similarity under which a retrieved chunk is not shown
            (``loom.orchestrator.relevance``; LlamaIndex's ``similarity_cutoff``): ``"auto"``
            (default) takes the retriever's measured one (``Retriever.similarity_cutoff``: 0.425
            for the bundled MiniLM, none for an unmeasured embedder); a number in [-1, 1]; ``None``
            shows every hit.  When a search finds nothing above it, the model is told the documents
            do not cover the message.
        no_match_answer: when set, a turn whose search found nothing relevant is answered with
            this text and no model call (LlamaIndex's query engines answer "Empty Response" the
            same way): for a documentation-QA agent, where small models otherwise answer an
            off-topic question with invented facts whatever they are told.  Default ``None``:
            the model answers, told the documents do not cover the message (an agent with tools
            or memory must, since a calculation or a greeting matches no document either).
            Such an agent also checks each answer against the passages it was shown
            (``loom.orchestrator.answer_check``).
        first_answer_k: with ``no_match_answer`` set, the relevant hits the turn's first answer is
            made from (default 1, the top one); when the check rejects that answer, the model
            answers once more from all of them before ``no_match_answer`` is given
            (``loom.orchestrator.answer_check``).  ``None``: all of them from the start.
        attribution_k: with ``no_match_answer`` set, the hits of the attribution search (default 8): an
            answer the check rejects for the last time for naming what the shown passages lack stands
            when sections not shown, related to the question, hold those names; they are cited
            (``RunResult.attributed``, ``loom.orchestrator.answer_check``).  ``None``: no such search.
        verifier: with ``no_match_answer`` set, a ``loom.orchestrator.answer_verifier.AnswerVerifier``
            (a second, larger model) that judges each answer the lexical check let through: one it
            finds unstated by the passages is rejected as an ungrounded one is.  Default ``None``.
        memory_k: memories to fetch per turn.
        tool_timeout_s: default tool timeout (seconds).
        memory_write_back: add each user message to long-term memory.
        tool_call_parser: the model's tool-call format: ``None``/``"auto"``
            detects it from the chat template (``loom.orchestrator.formats``), a name
            (``hermes``, ``llama3_json``, ``mistral``, ``default``) or a
            ``ToolCallFormat`` overrides it (vLLM's ``--tool-call-parser``).
        condense_question: how a turn after the first is searched (``loom.orchestrator.condense``):
            ``"history"`` (default; also ``True``) searches the previous user message and this one
            joined, with no model call; ``"model"`` has the model rewrite the message into a
            standalone question and fuses that with the message as typed; ``False``/``None``
            searches the message alone.
        condense_tokens: ``max_tokens`` of the model's rewrite (default 32).
        parallel_tool_calls: OpenAI's flag.  ``None`` (default): run every tool call of a
            reply (concurrently), and a forced ``tool_choice="required"`` step emits one call.
            ``True``: the same, and a forced ``"required"`` step may emit several calls (the
            grammar allows a list of calls in the model's format).  ``False``: only a reply's
            first call runs and each further call gets an error result asking for one call at
            a time (every call keeps a result, so the prompt never shows a call without one).
        approval: names of tools whose calls wait for a human decision before they run
            (besides tools made with ``@tool(requires_approval=True)``): the turn ends with
            ``final_state="awaiting_approval"`` and :meth:`resume` continues it
            (``loom.orchestrator.approval``; LangGraph's ``interrupt``, Letta's ``requires_approval``).
        cache_salt: ``SamplingParams.cache_salt`` of every model call of the agent, so the prefix cache
            shares its blocks only with calls of the same salt (the REST server salts by API key).
        cache_ttl_s: how long the session's KV stays pinned in the engine's pool after each model call
            (``loom.orchestrator.retention``; Anthropic's and Dynamo's ``cache_control`` ttl).
            ``None`` (default): pinned through tool calls only, for ``tool_timeout_s`` when the agent
            has tools (InferCept, Continuum); a number of seconds: also that long after an answer, so
            a session whose user comes back within it finds its prefix cached even when other
            sessions filled the pool; ``0``: never pinned.

    Raises:
        ValueError: bad arguments, naming the field.
    """

    def __init__(self, llm: Engine, tools: Any = None, retriever: Retriever | None = None,
                 memory: Memory | None = None,
                 system_prompt: str = "", budget: ContextBudget | None = None, max_steps: int = 6,
                 sampling: SamplingParams | None = None, tool_choice: ToolChoiceArg = "auto",
                 auto_retrieve: bool = True,
                 keep_reasoning: bool = DEFAULT_KEEP_REASONING, memory_namespace: str | None = None,
                 prices: PriceTable | None = None, retrieval_k: int = 4, memory_k: int = 4,
                 tool_timeout_s: float = 30.0, memory_write_back: bool = True,
                 tool_call_parser: Any = None, condense_question: bool | str | None = "history",
                 condense_tokens: int = DEFAULT_CONDENSE_TOKENS, parallel_tool_calls: bool | None = None,
                 approval: Iterable[str] = (), cache_salt: str | None = None,
                 cache_ttl_s: float | None = None, similarity_cutoff: float | str | None = "auto",
                 no_match_answer: str | None = None, first_answer_k: int | None = 1,
                 verifier: AnswerVerifier | None = None,
                 attribution_k: int | None = DEFAULT_ATTRIBUTION_K) -> None:
        if not isinstance(max_steps, int) or max_steps < 1:
            raise InvalidRequestError(f"max_steps: must be an int >= 1, got {max_steps!r}", param="max_steps")
        try:
            cutoff = resolve_cutoff(similarity_cutoff, retriever)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="similarity_cutoff") from None
        engine = EngineClient(llm, cache_salt)
        registry = _registry(tools, retriever, auto_retrieve, tool_timeout_s, cutoff)
        retention = RetentionPolicy.make(cache_ttl_s, tool_timeout_s if len(registry) else None)
        budget = (budget or ContextBudget()).with_window(engine.max_model_len)
        if budget.window > engine.max_model_len:
            raise InvalidRequestError(f"max_model_len: budget window {budget.window} exceeds the "
                                      f"engine's {engine.max_model_len} tokens", param="max_model_len")
        if no_match_answer is not None and (not isinstance(no_match_answer, str) or not no_match_answer.strip()):
            raise InvalidRequestError(f"no_match_answer: must be a non-empty string or None, got {no_match_answer!r}",
                                      param="no_match_answer")
        for param, k in (("first_answer_k", first_answer_k), ("attribution_k", attribution_k)):
            if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
                raise InvalidRequestError(f"{param}: must be an int >= 1 or None, got {k!r}", param=param)
        try:
            mode = condense_mode(condense_question)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="condense_question") from None
        if not isinstance(condense_tokens, int) or condense_tokens < 1:
            raise InvalidRequestError(f"condense_tokens: must be an int >= 1, got {condense_tokens!r}",
                                      param="condense_tokens")
        builder = ContextBuilder(engine.tokenizer, system_prompt, registry.schemas() or None, budget,
                                 keep_reasoning, _format(engine.tokenizer, tool_call_parser))
        self.parts = AgentParts(
            engine=engine, builder=builder, registry=registry,
            sampling=sampling if sampling is not None else _greedy(), prices=prices or PriceTable(),
            eos_token_ids=eos_token_ids(llm), retriever=retriever, memory=memory, max_steps=max_steps,
            auto_retrieve=auto_retrieve, memory_namespace=memory_namespace or "default",
            retrieval_k=retrieval_k, similarity_cutoff=cutoff, no_match_answer=no_match_answer,
            first_answer_k=first_answer_k, verifier=verifier, attribution_k=attribution_k,
            memory_k=memory_k, memory_write_back=memory_write_back,
            condense_question=mode, condense_tokens=condense_tokens,
            parallel_tool_calls=None if parallel_tool_calls is None else bool(parallel_tool_calls),
            approval=frozenset(approval or ()), retention=retention)
        self.tool_timeout_s = tool_timeout_s
        self.tool_choice = self.check_tool_choice(tool_choice)
        self.num_compactions = 0

    # the collaborators, read-only (AgentParts is frozen: one turn never changes them)
    engine = property(lambda self: self.parts.engine, doc="The model client (``EngineClient``).")
    builder = property(lambda self: self.parts.builder, doc="The prompt builder.")
    registry = property(lambda self: self.parts.registry, doc="The callable tools.")
    retriever = property(lambda self: self.parts.retriever, doc="The retriever, or ``None``.")
    memory = property(lambda self: self.parts.memory, doc="The long-term memory, or ``None``.")
    budget = property(lambda self: self.parts.budget, doc="The context budget (window set).")
    format = property(lambda self: self.parts.format, doc="The model's tool-call format.")

    def check_tool_choice(self, choice: ToolChoiceArg) -> ToolChoice:
        """Normalise a tool choice to ``auto|none|required`` or ``{"name": ...}``.

        Raises:
            InvalidRequestError: unknown value, an unknown tool, or required without tools.
        """
        name: object = choice
        if isinstance(choice, Mapping):
            name = (choice.get("function") or {}).get("name") or choice.get("name")
        if name == "auto" or name == "none":
            return "auto" if name == "auto" else "none"
        if name == "required" or (isinstance(name, str) and name in self.registry):
            if not len(self.registry):
                raise InvalidRequestError("tool_choice: 'required' needs at least one tool", param="tool_choice")
            return "required" if name == "required" else {"name": str(name)}
        raise InvalidRequestError(
            f"tool_choice: expected 'auto', 'none', 'required' or one of {self.registry.names}, got {choice!r}",
            param="tool_choice")

    async def stream(self, message: str, session: Session | None = None,
                     tool_choice: ToolChoiceArg | None = None) -> AsyncGenerator[AgentEvent, None]:
        """Run one user turn, yielding events; the last is ``DoneEvent(result)``.

        Raises:
            InvalidRequestError / ContextLengthError: before the first model call.
        """
        if not isinstance(message, str) or not message.strip():
            raise InvalidRequestError("message: must be a non-empty string", param="message")
        choice = self.check_tool_choice(tool_choice) if tool_choice is not None else self.tool_choice
        runner = TurnRunner(self.parts, session if session is not None else InMemorySession(), message, choice)
        waiting = pending_approval(runner.items)
        if waiting is not None:
            ids = [c["id"] for c in waiting["calls"]]
            raise InvalidRequestError(f"message: the session's last turn waits for approval of tool call(s) {ids}; "
                                      "decide them with Agent.resume first", param="message")
        async for ev in self._drive(runner, runner.run()):
            yield ev

    async def resume_stream(self, session: Session, decisions: JSON) -> AsyncGenerator[AgentEvent, None]:
        """Continue a turn paused for approval (``loom.orchestrator.approval``), yielding events like :meth:`stream`.

        ``decisions``: ``{call id: "approve" | "reject" | {"decision": "edit", "arguments": {...}} |
        {"decision": "reject", "reason": "..."} | {"decision": "result", "output": "..."}}``.

        Raises:
            InvalidRequestError: nothing pending, or bad decisions (naming ``decisions``).
        """
        runner = TurnRunner(self.parts, session, "", "auto")
        async for ev in self._drive(runner, runner.resume(decisions)):
            yield ev

    async def aresume(self, session: Session, decisions: JSON) -> RunResult:
        """:meth:`resume_stream` to the end; its :class:`RunResult`."""
        return await self._result(self.resume_stream(session, decisions))

    def resume(self, session: Session, decisions: JSON) -> RunResult:
        """Synchronous :meth:`aresume` (not from inside a running event loop)."""
        return asyncio.run(self.aresume(session, decisions))

    async def _drive(self, runner: TurnRunner, events: AsyncIterator[AgentEvent]) -> AsyncGenerator[AgentEvent, None]:
        t0 = time.perf_counter()
        result = runner.result
        try:
            async for ev in events:
                yield ev
        except (asyncio.CancelledError, GeneratorExit):
            result.final_state = "interrupted"
            raise
        except LoomError as exc:
            if result.steps == 0:  # refused before any model call: the turn leaves no trace in the session
                runner.forget_stored()
                raise
            logger.warning("agent turn ended with an error: %s", exc)
            result.final_state, result.error = "error", exc.message
        result.usage = Ledger.sum(runner.ledgers)
        result.timings["total"] = (time.perf_counter() - t0) * 1000.0
        self.num_compactions += result.compactions
        yield UsageEvent(result.usage)
        yield DoneEvent(result)
        if result.final_state != "awaiting_approval":
            before = result.compactions
            await compaction_hooks.after_turn(runner)
            self.num_compactions += result.compactions - before

    @staticmethod
    async def _result(events: AsyncIterator[AgentEvent]) -> RunResult:
        result: RunResult | None = None
        async for ev in events:
            if isinstance(ev, DoneEvent):
                result = ev.result
        assert result is not None
        return result

    async def arun(self, message: str, session: Session | None = None,
                   tool_choice: ToolChoiceArg | None = None) -> RunResult:
        """Run one user turn to the end; return its :class:`RunResult`."""
        return await self._result(self.stream(message, session=session, tool_choice=tool_choice))

    def run(self, message: str, session: Session | None = None, tool_choice: ToolChoiceArg | None = None) -> RunResult:
        """Synchronous :meth:`arun` (not from inside a running event loop).

        Raises:
            RuntimeError: called from a running event loop (use ``await arun``).
        """
        return asyncio.run(self.arun(message, session=session, tool_choice=tool_choice))


def _format(tokenizer: Tokenizer, parser: str | ToolCallFormat | None) -> ToolCallFormat:
    from loom.orchestrator.formats import detect_format

    if isinstance(parser, ToolCallFormat):
        return parser
    try:
        return detect_format(tokenizer, parser)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="tool_call_parser") from exc


def _greedy() -> SamplingParams:
    return SamplingParams(temperature=0.0)
