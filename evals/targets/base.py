"""What every target does: run a conversation turn by turn and emit one record per request.

A target sends one :class:`Request` at a time (``send``); the shared
:meth:`EngineTarget.conversation` builds each turn's prompt with
:class:`loom.evals.prompts.PromptState` (token ids and class spans for in-process
targets, chat messages for HTTP), appends the reply, and hands the record to
the run.  The ``rag`` target overrides ``conversation`` (the agent assembles
its own prompts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loom.evals.prices import Prices
from loom.evals.prompts import PromptState
from loom.evals.records import Outcome, make_record
from loom.evals.workloads import Conversation
from loom.json_types import JSONObject
from loom.orchestrator.protocols import Tokenizer


@dataclass
class Request:
    """One model call: prompt (ids and messages), output cap, and identity."""

    request_id: str
    prompt_ids: list[int]
    messages: list[dict[str, str]]
    max_tokens: int
    ignore_eos: bool = True
    seed: int | None = None
    spans: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class RunContext:
    """What a conversation needs from the run: names, prices, the clock origin and the sink."""

    variant: str
    prices: Prices
    t0: float
    emit: Callable[[JSONObject], None]
    ignore_eos: bool = True
    seed: int = 0


class EngineTarget:
    """Base of targets that take one prompt per request (in-process engine, HTTP, HF baseline)."""

    name = "engine"
    #: whether ``Outcome.output_ids`` are the real ids (False: re-encode the reply text).
    exact_ids = True

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer  # None: a target made only to check it answers (start / close)

    async def start(self) -> None:
        """Check the target is ready (HTTP: reachable)."""

    async def send(self, req: Request) -> Outcome:
        raise NotImplementedError

    def stats(self) -> JSONObject | None:
        """Engine counters, when the target can see them (as of the last ``refresh``)."""
        return None

    async def refresh(self) -> None:
        """Bring ``stats`` up to date (in process: always current; HTTP: scrape ``/metrics``)."""

    async def close(self) -> None:
        """Release the target's resources."""

    async def conversation(self, conv: Conversation, ctx: RunContext) -> None:
        """Send ``conv``'s turns one after another, each with the full history."""
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise RuntimeError(f"{type(self).__name__} was made without a tokenizer (a reachability probe)")
        state = PromptState(tokenizer, conv.system)
        for t, turn in enumerate(conv.turns):
            ids, spans = state.user_turn(turn.user)
            req = Request(f"{ctx.variant}-{conv.id}-t{t}", ids, list(state.messages), turn.max_tokens,
                          ctx.ignore_eos, seed=ctx.seed, spans=spans)
            out = await self.send(req)
            if out.prompt_tokens and out.prompt_tokens != len(ids):
                # The server tokenized differently: class split unknown, keep totals exact.
                spans = [("user", 0, out.prompt_tokens)]
            ctx.emit(make_record(out, spans, ctx.prices, ctx.t0, variant=ctx.variant, conversation=conv.id,
                                 turn=t, request_id=req.request_id, max_tokens=turn.max_tokens,
                                 class_spans=spans))
            if out.error is not None:
                return
            ids = out.output_ids if self.exact_ids else tokenizer.encode(out.text, add_special_tokens=False)
            state.add_reply(ids, out.text)
