"""``TurnRunner``: the state and steps of one user turn of an :class:`~loom.orchestrator.agent.Agent`.

Kept apart from ``Agent`` so the agent holds configuration only (its
:class:`~loom.orchestrator.parts.AgentParts`, which is all a turn reads) and a
turn's mutable state (items, ledgers, the result being built) lives and dies
here.
Items are written to the session as soon as they exist (this turn's inputs
before the first call, each reply together with its tool results), so an
interrupted turn loses nothing and never leaves a tool call without results.
The one exception is a documentation-QA turn whose first answer, made from its
top hits, fails the answer check: its inputs are taken back and stored again
showing every relevant hit before the model answers once more
(``loom.orchestrator.answer_check``).

A call the model already made in this turn with the same arguments (and which
succeeded) is not run again: it gets the earlier result with a note to answer,
and the next reply is read as the answer (its call-like markup is text), so a
model that asks the same thing after seeing the result still ends the turn with
an answer instead of running out of steps.  A call that failed and is made again
with the same arguments runs again (the error may have been passing), and the
reply after it is read as the answer too: asked the capital of Peru, Qwen2.5-Coder-0.5B
called the calculator with ``'capital of Peru'`` five times, each an error.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from opentelemetry.trace import Span

from loom.runtime.errors import InvalidRequestError
from loom.runtime.sampling_params import SamplingParams
from loom.tools.base import canonical_json

from loom.orchestrator import answer_check, answer_verifier, approval, compaction_hooks, memory_view, relevance, tracing
from loom.orchestrator import condense as cond
from loom.orchestrator.context import RetrievalFit
from loom.orchestrator.events import (
    AgentEvent,
    ApprovalRequiredEvent,
    ContentDelta,
    RunResult,
    ToolCallRecord,
    ToolResultEvent,
    ToolChoice,
    ToolResultRecord,
)
from loom.orchestrator.formats.format import TOOL_RESULT_TAGS, ToolCallFormat
from loom.orchestrator.formats.grammar import FORCED_MIN_TOKENS, force_call
from loom.orchestrator.items import DOCUMENT_END, JSON, Item, PendingCall, format_retrieval
from loom.orchestrator.ledger import Ledger
from loom.orchestrator.parsers import StreamingParser
from loom.orchestrator.parts import AgentParts
from loom.orchestrator.protocols import MemoryHit, MultiQueryRetriever, SearchHit
from loom.orchestrator.retention import session_key
from loom.orchestrator.session import Session
from loom.orchestrator.step import StepOutcome, model_call

logger = logging.getLogger(__name__)
T = TypeVar("T")


# What a repeated call gets after the earlier result: small models (Qwen2.5-Coder) asked the same call again
# after its result instead of answering, until the turn ran out of steps with no answer.
REPEATED_CALL_NOTE = ("(This call was already made in this turn with the same arguments; the result above is "
                      "its result.)")


# An answer step's reply: anything that does not open a tool call, i.e. does not start with a call's open
# marker (``<tool_call>`` or another ``<...>`` tag), a bare JSON call (``{"name": ...}``) or blank space.
ANSWER_REGEX = r"[^{<\s][\s\S]*"


def answer_only(sp: SamplingParams, fmt: ToolCallFormat) -> SamplingParams:
    """``sp`` for an answer step: the model cannot open a tool call in ``fmt``.

    The open marker is a stop string (the text keeps special tokens, so Hermes'
    one-token ``<tool_call>`` ends the answer too), so an answer that starts to
    call ends before it.  The reply is also constrained to :data:`ANSWER_REGEX`
    (its first character is not ``<``, ``{`` or blank, so it cannot open with a
    bare or fenced JSON call either; special tokens are never text to the
    grammar), except for a reasoning format, whose reply opens with its
    ``<think>`` block, and when the caller set its own ``structured_output``.
    """
    from loom.runtime.structured_output import StructuredOutputParams

    stop = sp.stop if fmt.open_in_body or fmt.call_open in sp.stop else [*sp.stop, fmt.call_open]
    if sp.structured_output is not None or fmt.reasoning:
        return sp.clone(stop=stop)
    return sp.clone(structured_output=StructuredOutputParams(regex=ANSWER_REGEX), stop=stop)


def _call_key(call: ToolCallRecord) -> str:
    return f"{call.name}\x00{canonical_json(call.arguments)}"


class TurnRunner:
    """Runs one turn; ``result`` and ``ledgers`` fill in as it goes."""

    def __init__(self, parts: AgentParts, session: Session, message: str, choice: ToolChoice) -> None:
        self.parts, self.session, self.message, self.choice = parts, session, message, choice
        self.items: list[Item] = session.get_items()
        self._start_len = len(self.items)  # the history before this turn
        self.turn = 1 + max((it.get("turn", 0) for it in self.items), default=0)
        self.result = RunResult(timings={"model": 0.0, "tools": 0.0, "retrieval": 0.0, "memory": 0.0})
        self.ledgers: list[Ledger] = []
        self.budget_cut: dict[str, int] = {}  # tokens this turn's caps left out, per class (first call's ledger)
        self._pending: list[Item] = []
        self._results: dict[str, ToolResultRecord] = {}  # this turn's successful calls, by name and arguments
        self._repeated = False  # a reply of this turn repeated a call it had the result of, or that failed before
        self._failed: set[str] = set()  # this turn's calls that ended in an error, by name and arguments
        self._answer_next = False  # the next model call is an answer step (module docstring)
        self._span: Span | None = None  # the turn's invoke_agent span (loom.orchestrator.tracing)
        self._memories: list[MemoryHit] = []  # this turn's new memory hits
        self._wide_fit: RetrievalFit | None = None  # every relevant hit, while the model was shown fewer
        self._tool_or_no_match = False  # nothing related, but a tool may answer (answer_check.tools_may_answer)
        # the sum the message writes out (answer_check.arithmetic_expression): a forced calculator call computes
        # it when nothing related is found; the choice is forced only then, so only then is it pinned
        self._expression = answer_check.arithmetic_expression(self)
        self._inputs_at = self._inputs_end = 0  # where this turn's inputs sit in ``items``

    def _store(self, new: list[Item]) -> None:
        self.session.add_items(new)
        self.items.extend(new)

    def forget_stored(self) -> None:
        """Take back every item this turn stored: its first model call was refused (a message too long for
        the window, say), and a refused turn must not stay in the history every later turn reloads."""
        self._take_back(self._start_len)
        self._pending = []

    def _take_back(self, at: int) -> None:
        """Remove ``items[at:]`` from the session and from ``items`` (they are the session's last items)."""
        for _ in range(len(self.items) - at):
            self.session.pop_item()
        del self.items[at:]

    async def _timed(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        t0 = time.perf_counter()
        try:
            with tracing.step_span(self._span, key):
                return await asyncio.to_thread(fn, *args)
        finally:
            self.result.timings[key] += (time.perf_counter() - t0) * 1000.0

    async def _prepare(self) -> None:
        a, b = self.parts, self.parts.builder
        memory_view.stale_marker(self)  # stores its marker itself
        shown: set[int | None] = {i for it in self.items for i in it.get("memory_ids") or []}
        memories: list[MemoryHit] = []
        if a.memory is not None:
            recalled = await self._timed("memory", a.memory.search, self.message, a.memory_namespace, a.memory_k)
            if not self.items:  # first turn: the snapshot, fixed for the whole session
                snap = b.snapshot_item(self.items, recalled)
                if snap is not None:
                    self._store([snap])
            else:
                memories = [h for h in recalled if h.id not in shown]
        hits, related = await self._search() if a.retriever is not None and a.auto_retrieve else ([], None)
        fit = b.fit_retrieval(hits, a.similarity_cutoff, related)
        self.result.no_match = fit.no_match
        n = a.first_answer_k
        if a.no_match_answer is not None and n is not None and len(fit.shown) > n:
            # a documentation-QA turn answers from its top hits first (loom.orchestrator.answer_check)
            self._wide_fit = fit
            fit = b.fit_retrieval(relevance.split_relevant(hits, a.similarity_cutoff, related)[0][:n])
        self._memories = memories
        self._show(fit)

    def _show(self, fit: RetrievalFit) -> None:
        """Store this turn's inputs (its retrieval message showing ``fit``, new memories, the user message)."""
        self.budget_cut = {"retrieval": fit.cut_tokens} if fit.cut_tokens else {}
        self.result.retrieved = list(fit.shown)
        self._inputs_at = len(self.items)
        self._store(self.parts.builder.turn_items(self.items, self.turn, self.message, fit, self._memories))
        self._inputs_end = len(self.items)

    def _widen(self) -> bool:
        """Show the turn's model every relevant hit instead of the top ones its rejected first answer was made
        from: its inputs are taken back from the session and stored again (the rejected reply was never
        stored).  ``False`` when there is nothing to widen or something was stored after the inputs."""
        wide, self._wide_fit = self._wide_fit, None
        if wide is None or len(self.items) != self._inputs_end:
            return False
        self._take_back(self._inputs_at)
        self.result.widened = True
        self._show(wide)
        return True

    async def _search(self) -> tuple[Sequence[SearchHit], bool | None]:
        """This turn's hits, and whether the search is related to the message when that is decided here
        (``None``: by its hits at the cutoff).  In ``"history"`` mode a message whose own search is related
        is searched as typed; else with the previous message joined, which must clear the cutoff by
        ``relevance.HISTORY_MARGIN`` (:mod:`loom.orchestrator.relevance`).  A message writing out a sum the
        calculator computes (``answer_check.writes_sum``, whatever the turn's ``tool_choice``) is never joined: it is no
        follow-up."""
        a, retriever = self.parts, self.parts.retriever
        assert retriever is not None
        cutoff = a.similarity_cutoff
        judged = a.condense_question == "history" and cutoff is not None and cond.needs_rewrite(self.items)
        if judged:
            typed = await self._timed("retrieval", retriever.search, self.message, a.retrieval_k)
            typed = await self._match_sentences(typed, cutoff)
            if relevance.is_related(typed, cutoff) or answer_check.writes_sum(self) is not None:
                return typed, None  # a sum written out is a calculation, not a follow-up of the documents
        queries = await self._queries()
        if queries != [self.message] and isinstance(retriever, MultiQueryRetriever):
            # a rewrite or the previous message joined: only what the user typed names entries
            hits = await self._timed("retrieval", lambda: retriever.search_many(
                queries, a.retrieval_k, identifier_queries=[self.message]))
        else:
            hits = await self._timed("retrieval", retriever.search, queries[0], a.retrieval_k)
        if judged and cutoff is not None:
            return hits, relevance.is_related(hits, cutoff + relevance.HISTORY_MARGIN)
        hits = await self._match_sentences(hits, cutoff)
        if cutoff is not None and hits and queries == [self.message] and not relevance.is_related(hits, cutoff):
            deeper = await self._timed("retrieval", retriever.search, self.message,
                                       relevance.DEEPER_FACTOR * a.retrieval_k)
            hits = relevance.deeper_related(hits, deeper, cutoff) or hits
        return hits, None

    async def _match_sentences(self, hits: Sequence[SearchHit], cutoff: float | None) -> Sequence[SearchHit]:
        """``hits`` with their near misses' sentences matched to the message (``relevance.match_sentences``), in a
        worker thread only when there is a near miss: a related search costs nothing more."""
        if not relevance.near_misses(self.parts.retriever, hits, cutoff):
            return hits
        return await self._timed("retrieval", relevance.match_sentences, self.parts.retriever, self.message, hits,
                                 cutoff)

    async def _queries(self) -> list[str]:
        """This turn's search queries: the condensed follow-up (when made), then the message."""
        a = self.parts
        if not (a.condense_question and cond.needs_rewrite(self.items)):
            return [self.message]
        if a.condense_question == "history":
            query = cond.history_query(cond.previous_message(self.items) or "", self.message)
            self.result.rewritten_query = query if query != self.message else None
            return [query]
        t0 = time.perf_counter()
        rewrite, led = await cond.condense_question(a, self.items, self.turn, self.message)
        self.result.timings["query_rewrite"] = (time.perf_counter() - t0) * 1000.0
        if led is not None:
            self.ledgers.append(led)
        self.result.rewritten_query = rewrite
        return cond.search_queries(self.message, rewrite)

    def _decide_answer_step(self, results: Sequence[ToolResultRecord]) -> bool:
        """Whether the call after ``results`` is an answer step: a call in them was a repeat, they answer the
        turn's forced named call, or the next step is the turn's last (module docstring)."""
        step = max((r.step for r in results), default=0)
        named = step == 1 and isinstance(self.choice, dict)
        self._answer_next = self._repeated or named or step + 1 >= self.parts.max_steps
        return self._answer_next

    def _sampling(self, forced: bool, prompt_len: int) -> SamplingParams:
        """The call's ``SamplingParams``: the agent's, with ``max_tokens`` fitted to the window.

        The engine stops on its own end-of-sequence ids; special tokens stay in
        the text (the parser needs ``<think>`` / ``<tool_call>``).
        """
        a = self.parts
        room = max(1, a.budget.window - prompt_len)
        sp = a.sampling.clone(max_tokens=max(1, min(a.budget.max_tokens, room)), skip_special_tokens=False)
        if a.retention is not None:  # the session's KV stays pinned through its tool call / its user's reply
            sp = sp.clone(kv_retention=a.retention.retention(self._retention_key()))
        if not forced:
            # the answer ends where a copied tool result or retrieved passage would close
            ends = [TOOL_RESULT_TAGS[1]] if a.registry.schemas() else []
            ends += [DOCUMENT_END] if a.retriever is not None else []
            new = [e for e in ends if e not in sp.stop]
            return sp.clone(stop=[*sp.stop, *new]) if new else sp

        name = self.choice["name"] if isinstance(self.choice, dict) else None
        schemas = a.registry.schemas()
        if self._expression is not None:
            schemas = answer_check.pin_expression(schemas, self._expression)
        return force_call(sp, a.format, schemas, name, bound=True,
                          min_tokens=min(FORCED_MIN_TOKENS, room),
                          parallel=name is None and a.parallel_tool_calls is True)

    async def _run_tools(self, outcome: StepOutcome, step: int) -> AsyncIterator[AgentEvent]:
        calls = [ToolCallRecord(outcome.call_id(c.index), c.name or "", dict(c.arguments), step, c.error)
                 for c in outcome.calls]
        first = calls[0].id if calls else None

        async def one(call: ToolCallRecord) -> ToolResultRecord:
            if self.parts.parallel_tool_calls is False and call.id != first:
                return ToolResultRecord(call.id, call.name, "Error: not run: call one tool at a time "
                                        "(parallel tool calls are off); call it again in your next reply.", True, step)
            if call.error is not None:
                return ToolResultRecord(call.id, call.name, f"Error: malformed tool call: {call.error}", True, step)
            earlier = self._results.get(_call_key(call))
            if earlier is not None:  # not run twice (a tool may act): its result again, and a word to answer
                self._repeated = True
                return ToolResultRecord(call.id, call.name, f"{earlier.content}\n\n{REPEATED_CALL_NOTE}",
                                        False, step)
            result = await self._call_tool(call)
            key = _call_key(call)
            if not result.is_error:
                self._results[key] = result
            elif key in self._failed:  # the same error again (run again: it may have been transient): answer next
                self._repeated = True
            else:
                self._failed.add(key)
            return result

        async for ev in self._run_calls(calls, one):
            yield ev

    async def _call_tool(self, call: ToolCallRecord) -> ToolResultRecord:
        """Run one call through the registry (its errors and timeouts become error results)."""
        with tracing.tool_span(self._span, call.name, call.id) as span:
            res = await self.parts.registry.call(call.name, call.arguments)
            if res.is_error:
                tracing.set_error(span, res.content)
        return ToolResultRecord(call.id, call.name, res.content, res.is_error, call.step, res.elapsed_ms)

    async def _run_calls(self, calls: list[ToolCallRecord], run: Callable[[ToolCallRecord], Awaitable[ToolResultRecord]],
                         before: list[Item] | None = None) -> AsyncIterator[AgentEvent]:
        """Run ``calls`` concurrently with ``run(call) -> ToolResultRecord`` under tool provenance (their
        output is untrusted), record calls and results, yield a ``ToolResultEvent`` each, and store
        ``before`` and the results' items together with the reply that made the calls."""
        t0 = time.perf_counter()
        with memory_view.tool_provenance(self):
            results = await asyncio.gather(*(run(c) for c in calls))
        self.result.timings["tools"] += (time.perf_counter() - t0) * 1000.0
        self.result.tool_calls.extend(calls)
        for r in results:
            self.result.tool_results.append(r)
            yield ToolResultEvent(r.id, r.name, r.content, r.is_error)
        new = (before or []) + self.parts.builder.tool_items(self.items, self.turn, results,
                                                             answer_request=self._decide_answer_step(results))
        self.session.add_items(self._pending + new)
        self.items.extend(new)
        self._pending = []

    async def run(self) -> AsyncIterator[AgentEvent]:
        """Yield the turn's events; ``result`` holds the outcome afterwards."""
        self._start_span()
        try:
            await self._prepare()
            self.result.unknown_terms = answer_check.unknown_terms(self)
            if (self.result.no_match or self.result.unknown_terms) and self.parts.no_match_answer is not None:
                if not answer_check.tools_may_answer(self):
                    async for ev in self._answer_without_model(self.parts.no_match_answer):
                        yield ev
                    return
                self._tool_or_no_match = True  # the model runs; its answer stands only after a tool call
                if self._expression is not None:  # the sum it writes out, computed by a forced calculator call
                    self.choice = answer_check.ARITHMETIC_CHOICE
            async for ev in self._loop(1):
                yield ev
        finally:
            self._end_span()

    async def _answer_without_model(self, text: str, step: int = 0) -> AsyncIterator[AgentEvent]:
        """Answer ``text`` (the agent's ``no_match_answer``) as the reply of ``step`` (0: no model call was
        made), stored as any reply is."""
        a, res = self.parts, self.result
        ids = a.engine.tokenizer.encode(text, add_special_tokens=False)
        item = a.builder.assistant_item(self.turn, ids, reasoning_mask=[False] * len(ids), content=text)
        item["step"], item["no_match"] = step, True  # later turns do not see this turn (compaction_plan)
        self._store([item])
        res.answer, res.final_state, res.steps, res.finish_reason = text, "done", step, "stop"  # a whole answer
        yield ContentDelta(text)
        if a.memory is not None and a.memory_write_back:
            await memory_view.write_back(self)

    def _start_span(self) -> None:
        self._span = tracing.agent_span("loom-agent", getattr(self.session, "session_id", None),
                                        self.parts.engine.model_name)

    def _end_span(self) -> None:
        """End the turn's span with its summed usage and final state (an error or interruption included)."""
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attributes(tracing.usage_attributes(Ledger.sum(self.ledgers)))
        span.set_attribute("loom.final_state", self.result.final_state)
        span.end()

    async def resume(self, decisions: JSON) -> AsyncIterator[AgentEvent]:
        """Continue the turn paused for approval: run the decided calls, then the loop.

        Raises:
            InvalidRequestError: nothing pending, or bad decisions (naming ``decisions``).
        """
        self._start_span()
        try:
            async for ev in self._resume(decisions):
                yield ev
        finally:
            self._end_span()

    async def _resume(self, decisions: JSON) -> AsyncIterator[AgentEvent]:
        pending = approval.pending_approval(self.items)
        if pending is None:
            raise InvalidRequestError("decisions: the session has no tool call waiting for approval",
                                      param="decisions")
        decided = approval.check_decisions(pending, decisions)
        self.turn = pending["turn"]
        self.message = next((it.get("content", "") for it in reversed(self.items)
                             if it.get("kind") == "user" and it.get("turn") == self.turn), "")
        step = pending["step"]
        calls = [ToolCallRecord(c["id"], c["name"], dict(decided[c["id"]].get("arguments", c["arguments"])), step)
                 for c in pending["calls"]]

        async def one(call: ToolCallRecord) -> ToolResultRecord:
            d = decided[call.id]
            if d["decision"] == "reject":
                reason = (d.get("reason") or "").strip()
                return ToolResultRecord(call.id, call.name, "The user rejected this call"
                                        + (f": {reason}" if reason else "."), True, step)
            if d["decision"] == "result":
                return ToolResultRecord(call.id, call.name, d["output"], False, step)
            return await self._call_tool(call)  # approved, or edited: with the decided arguments

        record: Item = {"kind": approval.DECISION, "turn": self.turn, "step": step, "decisions": decided}
        async for ev in self._run_calls(calls, one, before=[record]):
            yield ev
        async for ev in self._loop(step + 1):
            yield ev

    def _needs_approval(self, outcome: StepOutcome) -> list[str]:
        a = self.parts
        return [outcome.call_id(c.index) for c in outcome.calls if c.error is None and (
            c.name in a.approval or getattr(a.registry.get(c.name or ""), "requires_approval", False))]

    def _pause(self, outcome: StepOutcome, step: int, required: list[str]) -> ApprovalRequiredEvent:
        calls: list[PendingCall] = [{"id": outcome.call_id(c.index), "name": c.name or "",
                                     "arguments": dict(c.arguments)} for c in outcome.calls]
        self.session.add_items(self._pending + [approval.approval_item(self.turn, step, calls, required)])
        self._pending = []
        self.result.pending = calls
        self.result.final_state = "awaiting_approval"
        return ApprovalRequiredEvent(calls)

    async def _loop(self, first_step: int) -> AsyncIterator[AgentEvent]:
        """Model calls from ``first_step`` on, each followed by its tools, until an answer."""
        a, res = self.parts, self.result
        res.final_state = "max_steps"
        for step in range(first_step, a.max_steps + 1):
            await compaction_hooks.before_call(self)
            while True:  # once more after _widen
                ctx = a.builder.build(self.items, self.turn)
                forced = step == 1 and (self.choice == "required" or isinstance(self.choice, dict))
                answer = self._answer_next
                # no tools, no calls: a reply's call-like markup is its text (as a chat completion without tools)
                parse_tools = self.choice != "none" and bool(a.registry.names) and not answer
                outcome = StepOutcome(parser=StreamingParser(parse_tools=parse_tools, fmt=a.format,
                                                             tool_names=frozenset(a.registry.names)))
                sp = self._sampling(forced, len(ctx.token_ids))
                if answer:
                    sp = answer_only(sp, a.format)
                t0 = time.perf_counter()
                span = tracing.chat_span(self._span, a.engine.model_name, sp.max_tokens, sp.temperature)
                checked = answer_check.applies(self) or self._tool_or_no_match
                held: list[AgentEvent] | None = [] if checked else None
                try:
                    async for ev in model_call(a.engine, ctx, sp, outcome, self.turn, step, a.prices,
                                               f"agent-{uuid.uuid4().hex[:12]}"):
                        if held is not None and isinstance(ev, ContentDelta):
                            held.append(ev)  # shown once the answer is known to rest on the passages
                        else:
                            yield ev
                finally:
                    tracing.end_chat(span, outcome.ledger, outcome.finish_reason)
                res.timings["model"] += (time.perf_counter() - t0) * 1000.0
                res.steps = step
                if step == 1:
                    outcome.ledger.budget_cut.update(self.budget_cut)
                self.ledgers.append(outcome.ledger)
                res.timings.setdefault("ttft", outcome.ledger.ttft_ms)
                if held is not None and not outcome.calls and outcome.finish_reason != "abort":
                    reply = outcome.parser.content.strip()
                    unsupported = (answer_check.without_tool(self) if self._tool_or_no_match
                                   else answer_check.reasons(self, reply))
                    if not unsupported and not self._tool_or_no_match and a.verifier is not None:
                        unsupported = await self._verify(reply)
                    if unsupported:
                        res.rejected.append(reply)
                    if unsupported and not self._tool_or_no_match and self._widen():  # no passages to widen to
                        continue  # answered again, shown every relevant hit
                    if unsupported and not self._tool_or_no_match and await self._attribute(reply, unsupported):
                        unsupported = []  # the documents state it, in sections found after it was written
                    if unsupported:
                        res.unsupported = unsupported
                        async for ev in self._answer_without_model(a.no_match_answer or "", step):
                            yield ev
                        return
                break
            for ev in held or ():
                yield ev
            self._store_reply(outcome, step)
            await self._retime_pins(outcome)
            res.finish_reason = outcome.finish_reason
            if outcome.finish_reason == "abort":
                res.final_state = "interrupted"
                return
            if not outcome.calls:
                res.answer = outcome.parser.content.strip()
                res.final_state = "done"
                break
            required = self._needs_approval(outcome)
            if required:
                yield self._pause(outcome, step, required)
                return
            async for ev in self._run_tools(outcome, step):
                yield ev
        if res.final_state == "done" and a.memory is not None and a.memory_write_back:
            await memory_view.write_back(self)

    async def _attribute(self, reply: str, unsupported: list[str]) -> bool:
        """Whether the attribution search (``answer_check``'s module docstring) finds sections that ground
        ``reply``, rejected for ``unsupported``, and the verifier (when the agent has one) finds it stated by
        them and the passages shown; they are added to ``RunResult.retrieved`` and ``RunResult.attributed``."""
        a = self.parts
        query = answer_check.attribution_query(self, unsupported)
        if query is None or a.retriever is None or a.attribution_k is None:
            return False
        hits = await self._timed("retrieval", a.retriever.search, query, a.attribution_k)
        found = answer_check.attributed(self, reply, hits)
        if not found or (a.verifier is not None and await self._verify(reply, [format_retrieval(found)])):
            return False
        self.result.retrieved += found
        self.result.attributed = list(found)
        return True

    async def _verify(self, reply: str, also: Sequence[str] = ()) -> list[str]:
        """``[answer_verifier.NOT_STATED]`` when the agent's verifier finds ``reply`` unstated by this turn's
        passages and the texts ``also`` (``loom.orchestrator.answer_verifier``); its margin goes to
        ``RunResult.verifier_margins``."""
        verifier = self.parts.verifier
        assert verifier is not None
        passages = [str(i.get("content") or "") for i in self.items
                    if i["kind"] == "retrieval" and i["turn"] == self.turn] + list(also)
        t0 = time.perf_counter()
        verdict = await verifier.verdict(passages, self.message, reply,
                                         getattr(self.parts.engine, "cache_salt", None))
        timings = self.result.timings
        timings["verifier"] = timings.get("verifier", 0.0) + (time.perf_counter() - t0) * 1e3
        self.result.verifier_margins.append(verdict.margin)
        return [] if verdict.stated else [answer_verifier.NOT_STATED]

    def _retention_key(self) -> str:
        return session_key(getattr(self.parts.engine, "cache_salt", None), self.session)

    async def _retime_pins(self, outcome: StepOutcome) -> None:
        """Now that the reply is read: keep the session's KV for its tool, or its user, or let it go."""
        policy = self.parts.retention
        if policy is None or outcome.finish_reason not in ("stop", "length"):
            return
        ttl, on_tool = policy.after_reply(bool(outcome.calls))
        await self.parts.engine.retain_kv(self._retention_key(), ttl, on_tool)

    def _store_reply(self, outcome: StepOutcome, step: int) -> None:
        p = outcome.parser
        reasoning = p.reasoning.strip()
        if reasoning:
            self.result.reasoning += ("\n" if self.result.reasoning else "") + reasoning
        item = self.parts.builder.assistant_item(
            self.turn, outcome.output_ids, eos_token_ids=self.parts.eos_token_ids,
            reasoning_mask=[c == "reasoning" for c in outcome.classes],
            content=p.content.strip(), reasoning_content=reasoning or None,
            tool_calls=outcome.tool_calls_field() or None)
        item["step"] = step
        if outcome.calls:  # stored together with its results in _run_tools, never alone
            self.items.append(item)
            self._pending = [item]
        else:
            self._store([item])
