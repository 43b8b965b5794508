"""When a session's view is compacted: after a turn (prefilled off the critical path), or before a call.

Owner of the compaction *decisions* (what to hide is planned by
:mod:`loom.orchestrator.compaction_plan`, the summary call is :mod:`loom.orchestrator.summarize`).

- :func:`after_turn` (``Agent.stream`` awaits it once it has yielded
  ``DoneEvent``, so a streaming client already has the answer): forecasts the
  next turn's prompt (this view + :func:`forecast`: the inputs of recent turns
  with a margin, retrieval and new memories at most their caps, the message
  as long as recent ones) and, when it would not fit,
  makes the compaction now: summary if whole turns go and the budget says
  ``summarize``, marker appended (``"after_turn": True``), then the compacted
  prompt prefilled in the engine with a ``max_tokens=1`` request.  The next
  turn, its condense-question rewrite included, then starts on a cached
  prefix instead of paying the whole re-prefill inside its TTFT.
- :func:`before_call` (``TurnRunner`` calls it before each model call): the
  safety net when a turn outgrows the window anyway (more retrieval or tool
  results than forecast); compacts inline, as before.

It runs inline after ``DoneEvent``, not as a background task, because (1) the
marker must be written while the turn still owns the session (a REST turn's
lease; an SDK caller's next ``arun`` cannot start before this one returns),
so the log never interleaves with the next turn's items; (2) ``Agent.run``
runs each turn in its own ``asyncio.run``, which would cancel a background
prefill at once; (3) the next turn's first call (the condense rewrite) comes
before any compaction hook, so it could not wait for a background prefill.
Inline, a second request on the same engine simply queues behind it.

Accounting: the after-turn calls (summary, prefill) are made after the
turn's ``UsageEvent``; their ledger is ``RunResult.after_turn_usage`` (set on
the result object the caller holds) and ``RunResult.timings["compaction_prefill"]``
the prefill's wall time (ms).  A failing after-turn step is logged and
changes nothing else (a marker is only stored before the prefill, which
cannot corrupt it; an aborted or failed request frees its KV blocks in the
engine).
"""

from __future__ import annotations

import logging
import time
import uuid

from loom.orchestrator import compaction_plan as comp
from loom.orchestrator.budget import TYPICAL_MESSAGE_TOKENS
from loom.orchestrator.items import Item
from loom.orchestrator.ledger import Ledger
from loom.orchestrator.parts import AgentParts
from loom.orchestrator.step import StepOutcome, model_call
from loom.orchestrator.summarize import summarize_turns
from loom.orchestrator.turn_state import TurnState
from loom.runtime.errors import LoomError
from loom.runtime.kv_retention import KVRetention

logger = logging.getLogger(__name__)

PREFILL_REQUEST_PREFIX = "compaction-prefill-"
INPUT_KINDS = ("retrieval", "memory", "user")  # what a turn adds before its first call
FORECAST_TURNS = 8


async def _make_marker(parts: AgentParts, items: list[Item], turn: int, plan: comp.Plan,
                       ledgers: list[Ledger], label: int, after_turn: bool) -> Item:
    """The marker for ``plan`` (with a summary of the earlier turns when whole turns go and the budget says so)."""
    summary = None
    if parts.budget.compaction == "summarize" and plan.turns:
        try:
            text, led = await summarize_turns(parts, items, turn, plan.docs, plan.turns)
            ledgers.append(led)
            summary = parts.builder.summary_item(items, turn, text)
        except LoomError as exc:  # the turns are dropped without a summary rather than failing the turn
            logger.warning("compaction summary skipped: %s", exc)
    return comp.marker(label, plan.groups, summary, after_turn=after_turn)


async def before_call(runner: TurnState) -> None:
    """Compact the view of ``runner``'s session when the next prompt needs it (appends a marker)."""
    a = runner.parts
    plan = a.builder.plan_compaction(runner.items, runner.turn)
    if plan is None or not plan.groups:
        return
    mk = await _make_marker(a, runner.items, runner.turn, plan, runner.ledgers, runner.turn, after_turn=False)
    runner._store([mk])
    runner.result.compactions += 1
    logger.info("compacted session view at turn %d: hid %d items", runner.turn, sum(map(len, plan.groups)))


async def prefill(parts: AgentParts, items: list[Item], turn: int,
                  retention: KVRetention | None = None) -> Ledger:
    """Prefill the prompt turn ``turn`` will start with (its view up to the history's end), ``max_tokens=1``.

    ``retention``: the session's idle pin; the compacted prompt's blocks are then pinned for the
    user's return in place of the turn's last call's (whose blocks past the cut the session never
    reads again).

    Returns:
        the request's ledger (classes of the prompt it prefilled; one output token).

    Raises:
        whatever the engine raises; the request is aborted (its blocks freed) when cancelled.
    """
    ctx = parts.builder.build(items, turn)
    gen = ctx.segments.pop()  # the generation prompt: the next turn goes on with its own messages
    del ctx.token_ids[gen.start:]
    sp = parts.sampling.clone(max_tokens=1, skip_special_tokens=False, kv_retention=retention)
    outcome = StepOutcome()
    outcome.parser.parse_tools = False
    async for _ in model_call(parts.engine, ctx, sp, outcome, turn, 0, parts.prices,
                              f"{PREFILL_REQUEST_PREFIX}{uuid.uuid4().hex[:12]}"):
        pass
    return outcome.ledger


def forecast(parts: AgentParts, items: list[Item], turns: int = FORECAST_TURNS) -> int:
    """Tokens the next turn's inputs (retrieval, new memories, message) will likely add to the prompt.

    ``ContextBudget.next_turn_tokens`` when set.  Else two parts: retrieval and
    memory, the largest of the last ``turns`` turns plus a fifth (hits vary in
    size) but never more than their caps (``max_retrieval_tokens``,
    ``max_memory_tokens``; the caps themselves before any turn was seen); and
    the user message, which has no cap: the largest recent message plus a
    fifth (``TYPICAL_MESSAGE_TOKENS`` before any).  Forecasting the caps when
    hits are smaller compacts turns earlier than needed; forecasting too little
    leaves the rest to :func:`before_call` (an in-turn compaction, a cache miss
    on that turn).
    """
    b = parts.budget
    if b.next_turn_tokens is not None:
        return b.next_turn_tokens
    cap = b.next_turn_margin(retrieval=parts.retriever is not None and parts.auto_retrieve,
                             memory=parts.memory is not None) - TYPICAL_MESSAGE_TOKENS
    docs: dict[int, int] = {}
    messages: dict[int, int] = {}
    for it in items:
        kind = it.get("kind")
        if kind in INPUT_KINDS:
            into = messages if kind == "user" else docs
            into[it["turn"]] = into.get(it["turn"], 0) + len(it["token_ids"])
    seen = sorted(set(docs) | set(messages))[-turns:]
    if not seen:
        return cap + TYPICAL_MESSAGE_TOKENS
    recent_docs = max(docs.get(t, 0) for t in seen)
    recent_message = max(messages.get(t, 0) for t in seen)
    return min(cap, int(1.2 * recent_docs)) + int(1.2 * recent_message)


async def after_turn(runner: TurnState) -> Ledger | None:
    """Make the compaction the next turn will need and prefill its prompt (see the module docstring).

    Returns:
        the ledger of the after-turn calls (``None`` when nothing was done).
        Never raises (except cancellation): a failure is logged and the next
        turn compacts before its call, as without this step.
    """
    a, res = runner.parts, runner.result
    if not a.budget.prefill_after_turn or res.final_state not in ("done", "max_steps"):
        return None
    nxt = runner.turn + 1
    margin = forecast(a, runner.items)
    ledgers: list[Ledger] = []
    try:
        plan = a.builder.plan_compaction(runner.items, nxt, margin)
        if plan is None or not plan.groups:
            return None
        mk = await _make_marker(a, runner.items, nxt, plan, ledgers, runner.turn, after_turn=True)
        runner._store([mk])
        res.compactions += 1
        logger.info("compacted session view after turn %d: hid %d items (%d whole turns)",
                    runner.turn, sum(map(len, plan.groups)), len(plan.turns))
        t0 = time.perf_counter()
        idle = a.retention.idle_retention(runner._retention_key()) if a.retention is not None else None
        ledgers.append(await prefill(a, runner.items, nxt, idle))
        res.timings["compaction_prefill"] = (time.perf_counter() - t0) * 1000.0
    except Exception as exc:  # noqa: BLE001 - work for the next turn must never fail this one
        logger.warning("after-turn compaction stopped: %s", exc)
    usage = Ledger.sum(ledgers) if ledgers else None
    res.after_turn_usage = usage
    return usage
