"""One session turn from request to stored outcome: the single owner of a turn's lifecycle.

A turn (a posted message, or decisions that resume a paused turn) goes through:

1. **claim**: the session's turn lease (:class:`~loom.api.turn_lease.TurnLeaseKeeper`),
   so one turn at a time runs per session in any worker (409 ``session_busy``);
2. **start**: a message sent with an ``Idempotency-Key`` whose turn already ended gets that turn back
   (``Idempotent-Replayed: true``), not a second turn (a client's retry, or the ingress resending to
   another replica after the first died having answered); otherwise
   the agent is built from the session's stored configuration
   (:func:`loom.api.turns.build_agent`) and the turn row is committed before the model runs;
3. **respond**: the agent's events are consumed whole (a :class:`TurnOut`) or streamed as
   server-sent events; the first :class:`~loom.orchestrator.events.DoneEvent` records the
   outcome (answer, ledger, metrics), after-turn work (a compaction's prefill) is added;
4. **close** (on every way out, once): a turn with no outcome is ``interrupted``, the agent's
   stream is closed (which aborts its engine request) and the lease released.  A streamed turn
   stores the answer text it has sent every second meanwhile, so an interrupted turn keeps what
   its client saw, even when the process was killed.

The routes in :mod:`loom.api.routes.sessions` only parse requests and call
:func:`post_message_turn` / :func:`post_approvals_turn`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.background import BackgroundTask

from loom.api import turns as T
from loom.api.engine_io import engine_max_model_len, settle, until_disconnect
from loom.api.errors import SessionBusyError, error_body, loom_error_body
from loom.api.prompt_limits import check_text_chars
from loom.api.schemas.sessions import ApprovalCreate, MessageCreate, SessionCreate, TurnOut
from loom.api.services import Services
from loom.api.store import IDEMPOTENCY_KEY_MAX, ChatSession, Turn
from loom.api.turn_lease import TurnLeaseKeeper
from loom.orchestrator.approval import check_decisions, pending_approval
from loom.orchestrator.events import AgentEvent, ContentDelta, DoneEvent, RunResult
from loom.orchestrator.items import JSON
from loom.runtime.errors import ContextLengthError, InvalidRequestError, LoomError, NotFoundError

log = logging.getLogger(__name__)


def own_session(services: Services, session_id: str, owner: str) -> ChatSession:
    """The caller's session ``session_id``.

    Raises:
        NotFoundError: no such session, or another owner's (the same 404: ids cannot be probed).
    """
    row = services.require_store().get_session(session_id, owner)
    if row is None:
        raise NotFoundError(f"No session {session_id!r}.", param="session_id")
    return row


async def claim_lease(services: Services, session_id: str, owner: str) -> TurnLeaseKeeper:
    """The session's turn lease (409 ``session_busy`` while a turn runs; 404 if it was deleted meanwhile)."""
    try:
        return await TurnLeaseKeeper.claim(services.require_store(), session_id, services.settings.turn_lease_s)
    except SessionBusyError:
        own_session(services, session_id, owner)  # deleted meanwhile: 404, not 409
        raise


async def post_message_turn(services: Services, owner: str, session_id: str, body: MessageCreate,
                            request: Request) -> TurnOut | JSONResponse | EventSourceResponse:
    """Run one agent turn for a posted message (the message is stored before the model runs).

    Raises:
        NotFoundError: no such session of the caller's.
        InvalidRequestError: a malformed ``Idempotency-Key`` (:func:`idempotency_key`).
        SessionBusyError: another turn runs on the session, or its last turn waits for decisions.
        LoomError: the agent cannot be built or its first step fails (before anything streams).
    """
    row = own_session(services, session_id, owner)
    key = idempotency_key(request)
    cfg = SessionCreate.model_validate(row.config)
    await check_message_fits(services, body.content, cfg.sampling.max_tokens)
    run = _TurnRun(services, session_id, await claim_lease(services, session_id, owner))
    try:
        earlier = services.require_store().settled_turn(session_id, key) if key is not None else None
        if earlier is not None:  # a resend of a message whose turn already ended: that turn, not a second one
            return _replay(services, earlier, body.stream)
        agent = T.build_agent(services, owner, cfg)
        history = T.agent_session(services, session_id)
        waiting = pending_approval(history.get_items())
        if waiting is not None:
            raise SessionBusyError(f"The session's last turn waits for decisions on tool call(s) "
                                   f"{[c['id'] for c in waiting['calls']]}; POST /v1/sessions/{session_id}/approvals "
                                   "first.", param="session_id")
        choice = T.tool_choice_arg(body.tool_choice) if body.tool_choice is not None else None
        run.turn_id = services.require_store().start_turn(session_id, body.content, key).id
        run.events = T.agent_events(agent, body.content, history, choice)
        return await _respond(run, request, body.stream)
    finally:
        if not run.handed_off:
            await run.close()


IDEMPOTENCY_HEADER = "Idempotency-Key"


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` header (Stripe's and the IETF draft's name), or ``None``.

    Raises:
        InvalidRequestError: a key longer than :data:`~loom.api.store.IDEMPOTENCY_KEY_MAX` characters or empty.
    """
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not 0 < len(key) <= IDEMPOTENCY_KEY_MAX:
        raise InvalidRequestError(f"{IDEMPOTENCY_HEADER}: must be 1 to {IDEMPOTENCY_KEY_MAX} characters",
                                  param=IDEMPOTENCY_HEADER)
    return key


def _replay(services: Services, turn: Turn, stream: bool) -> JSONResponse | EventSourceResponse:
    """The stored outcome of an earlier turn with the same key, marked ``Idempotent-Replayed: true``: as JSON, or as
    a stream of only its final ``turn`` event and ``[DONE]`` (its deltas were the first response's)."""
    out = turn_out(services, turn).model_dump(mode="json")
    headers = {"Idempotent-Replayed": "true"}
    if not stream:
        return JSONResponse(out, headers=headers)

    async def events() -> AsyncIterator[dict[str, str]]:
        yield {"data": json.dumps({"type": "turn", "turn": out})}
        yield {"data": "[DONE]"}

    return EventSourceResponse(events(), headers=headers)


async def check_message_fits(services: Services, content: str, max_tokens: int) -> None:
    """Refuse a message that cannot fit the window with the reply's ``max_tokens``, before anything is stored.

    Tokenized off the event loop; text over the character bound of :mod:`loom.api.prompt_limits` is refused
    without tokenizing it.

    Raises:
        ContextLengthError: naming ``content`` (a 400; the session and its history are untouched).
    """
    engine = services.require_engine()
    window = engine_max_model_len(engine)
    if window is None:
        return
    check_text_chars(engine.tokenizer, window, len(content), "content")
    if len(content.encode()) + 1 + max_tokens < window:
        return  # a token spells at least a byte (+1: a tokenizer's leading-space marker): it fits; the agent
        # tokenizes it anyway
    tokens = len(await anyio.to_thread.run_sync(lambda: engine.tokenizer.encode(content, add_special_tokens=False)))
    if tokens + max_tokens >= window:
        raise ContextLengthError(f"This model's maximum context length is {window} tokens, but the message has "
                                 f"{tokens} tokens and the session's replies take up to {max_tokens}.",
                                 param="content")


async def post_approvals_turn(services: Services, owner: str, session_id: str, body: ApprovalCreate,
                              request: Request) -> TurnOut | EventSourceResponse:
    """Resume the turn paused on tool calls with the caller's decisions, then run it to its answer.

    Raises:
        NotFoundError: no such session of the caller's.
        SessionBusyError: nothing waits for a decision.
        InvalidRequestError: an unknown call id or a missing decision (the turn keeps waiting).
    """
    row = own_session(services, session_id, owner)
    cfg = SessionCreate.model_validate(row.config)
    run = _TurnRun(services, session_id, await claim_lease(services, session_id, owner))
    try:
        history = T.agent_session(services, session_id)
        turns = services.require_store().turns(session_id)
        waiting = pending_approval(history.get_items())
        if waiting is None or not turns or turns[-1].state != "awaiting_approval":
            raise SessionBusyError("No tool call of this session waits for a decision.", param="session_id")
        decisions = [d.model_dump(exclude_none=True) for d in body.decisions]
        check_decisions(waiting, decisions)  # a bad decision is a 400 that leaves the turn waiting
        agent = T.build_agent(services, owner, cfg)
        run.turn_id, run.prior = turns[-1].id, turns[-1]
        run.events = agent.resume_stream(history, decisions)
        return await _respond(run, request, body.stream)
    finally:
        if not run.handed_off:
            await run.close()


async def _respond(run: _TurnRun, request: Request, stream: bool) -> TurnOut | EventSourceResponse:
    if stream:
        first = await _first_event(run)  # errors before the model runs: 4xx
        run.handed_off = True  # the stream owns the turn now; the background task is its last resort
        return EventSourceResponse(_stream_turn(run, first), ping=15, background=BackgroundTask(run.close))
    return await _run_turn(run, request)


def turn_out(services: Services, turn: Turn) -> TurnOut:
    """A stored turn as the API shows it; a paused turn lists the tool calls waiting for decisions."""
    out = T.turn_out(turn)
    if turn.state == "awaiting_approval":
        waiting = pending_approval(T.agent_session(services, turn.session_id).get_items())
        out.pending_tool_calls = list(waiting["calls"]) if waiting is not None else []
    return out


class _TurnRun:
    """One running turn: records its outcome once, and on close aborts the agent and frees the lease."""

    def __init__(self, services: Services, session_id: str, lease: TurnLeaseKeeper) -> None:
        self.services, self.session_id, self.lease = services, session_id, lease
        self.turn_id: int | None = None
        self.events: AsyncGenerator[AgentEvent, None] | None = None  # the agent's; aclose() aborts it
        self.settled = False
        self.handed_off = False  # a streamed response owns the turn (it closes it)
        self.prior: Turn | None = None  # a resumed turn's row as it paused (its calls and usage are kept)

    def finish(self, **fields: JSON) -> None:
        """Record the turn's outcome (the first outcome wins)."""
        if self.settled or self.turn_id is None:
            return
        self.settled = True
        self.services.require_store().finish_turn(self.turn_id, **fields)

    def done(self, result: RunResult) -> None:
        """Record a finished agent run (answer, ledger) and its metrics; a resumed turn keeps the
        calls and results of its first part."""
        fields = T.result_fields(result)
        if self.prior is not None:
            fields["tool_calls"] = list(self.prior.tool_calls or []) + fields["tool_calls"]
            fields["tool_results"] = list(self.prior.tool_results or []) + fields["tool_results"]
        self.finish(**fields)
        T.record_metrics(self.services, result.usage)

    def after_turn(self, result: RunResult | None) -> None:
        """Add the work the agent did after the answer for the next turn (a compaction's summary
        and prefill; it runs after the ``done`` event) to the stored ledger and the metrics."""
        if result is None or not self.settled or self.turn_id is None:
            return
        ledger = T.after_turn_ledger(result)
        if ledger is None:
            return
        self.services.require_store().amend_turn(self.turn_id, ledger=ledger)
        T.record_metrics(self.services, result.after_turn_usage)

    def stored(self) -> TurnOut:
        """The turn as stored now.

        Raises:
            NotFoundError: the turn is gone (its session was deleted after the lease lapsed).
        """
        for t in self.services.require_store().turns(self.session_id):
            if t.id == self.turn_id:
                return turn_out(self.services, t)
        raise NotFoundError(f"Session {self.session_id!r} was deleted during the turn.", param="session_id")

    async def save_streamed(self, answer: str) -> None:
        """Store the answer text streamed so far on the running turn (off the event loop)."""
        if self.settled or self.turn_id is None:
            return
        turn_id, store = self.turn_id, self.services.require_store()
        await anyio.to_thread.run_sync(lambda: store.amend_turn(turn_id, answer=answer))

    async def close(self) -> None:
        """Idempotent last step of every turn: mark it interrupted if nothing was recorded, close the
        agent's stream (which aborts its engine request), release the lease."""
        self.finish(state="interrupted", error="client disconnected")
        with anyio.CancelScope(shield=True):
            events, self.events = self.events, None
            if events is not None:
                await events.aclose()
            await self.lease.release()


def _error_text(exc: BaseException) -> str:
    return exc.message if isinstance(exc, LoomError) else str(exc) or type(exc).__name__


async def _first_event(run: _TurnRun) -> AgentEvent | None:
    assert run.events is not None  # set before the turn responds
    try:
        return await run.events.__anext__()
    except StopAsyncIteration:
        return None
    except BaseException as exc:
        run.finish(state="error", error=_error_text(exc))
        raise


async def _run_turn(run: _TurnRun, request: Request) -> TurnOut:
    events = run.events
    assert events is not None  # set before the turn responds

    async def consume() -> RunResult | None:
        result = None
        async for ev in events:
            if isinstance(ev, DoneEvent):
                result = ev.result
        return result

    work = asyncio.ensure_future(consume())
    try:
        result = await until_disconnect(request, work, on_disconnect=lambda: run.finish(
            state="interrupted", error="client disconnected"))
    except Exception as exc:
        run.finish(state="error", error=_error_text(exc))  # after a disconnect: already interrupted
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await settle(work)  # a cancelled consumer must unwind before the stream can close
    if result is None:  # Agent.stream ends with a DoneEvent unless it raises
        run.finish(state="error", error="the agent's stream ended without a result")
        raise RuntimeError("the agent's stream ended without a DoneEvent")
    run.done(result)
    run.after_turn(result)
    return run.stored()


async def _chain(first: AgentEvent | None, rest: AsyncIterator[AgentEvent]) -> AsyncIterator[AgentEvent]:
    if first is not None:
        yield first
        async for ev in rest:
            yield ev


SAVE_STREAMED_EVERY_S = 1.0
"""A streamed turn stores the answer text it has sent so far at its first text and then this often (s), so a
process killed mid-turn leaves the text the client already saw on the ``interrupted`` turn."""


async def _stream_turn(run: _TurnRun, first: AgentEvent | None) -> AsyncIterator[dict[str, str]]:
    assert run.events is not None  # set before the turn responds
    try:
        result = None
        streamed: list[str] = []
        saved_at: float | None = None  # the first text is stored at once, then every SAVE_STREAMED_EVERY_S
        async for ev in _chain(first, run.events):
            if isinstance(ev, DoneEvent):
                result = ev.result
                run.done(result)
            yield {"data": json.dumps(T.event_json(ev))}
            if isinstance(ev, ContentDelta):
                streamed.append(ev.text)
                if saved_at is None or time.monotonic() - saved_at >= SAVE_STREAMED_EVERY_S:
                    saved_at = time.monotonic()
                    await run.save_streamed("".join(streamed))
        run.after_turn(result)  # the agent's stream ends after its after-turn work
        if run.settled:
            yield {"data": json.dumps({"type": "turn", "turn": run.stored().model_dump(mode="json")})}
        yield {"data": "[DONE]"}
    except LoomError as exc:
        run.finish(state="error", error=exc.message)
        yield {"data": json.dumps(loom_error_body(exc))}
    except (asyncio.CancelledError, GeneratorExit):
        raise  # client went away mid-turn: close() below marks the turn interrupted
    except Exception as exc:
        log.exception("session turn failed")
        run.finish(state="error", error=str(exc))
        yield {"data": json.dumps(error_body("Internal server error", "internal_error"))}
    finally:
        await run.close()
