"""What ``Agent.stream`` yields and what ``Agent.run`` returns.

Events are small dataclasses with a ``type`` field (smolagents' "steps as
data"), so a REST endpoint can forward them as server-sent events and a test
can match on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from loom.orchestrator.items import JSON, PendingCall
from loom.orchestrator.ledger import Ledger
from loom.orchestrator.protocols import SearchHit

FinalState = Literal["done", "max_steps", "interrupted", "error", "awaiting_approval"]


class NamedToolChoice(TypedDict):
    """A tool choice forcing one tool by name."""

    name: str


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice
"""A tool choice as ``Agent.check_tool_choice`` normalises it (see ``loom.orchestrator.agent``)."""


@dataclass
class ReasoningDelta:
    """Reasoning text (inside ``<think>``) as it streams."""

    text: str
    type: Literal["reasoning_delta"] = "reasoning_delta"


@dataclass
class ContentDelta:
    """Answer text as it streams."""

    text: str
    type: Literal["content_delta"] = "content_delta"


@dataclass
class ToolCallEvent:
    """A tool call as it streams (``arguments_delta``) and once complete (``arguments`` set).

    ``error`` is set on the final event of a malformed call.
    """

    id: str
    name: str | None = None
    arguments_delta: str = ""
    arguments: dict[str, JSON] | None = None
    index: int = 0
    error: str | None = None
    type: Literal["tool_call"] = "tool_call"


@dataclass
class ApprovalRequiredEvent:
    """The turn paused: these calls wait for a human's decision (``Agent.resume``).

    ``calls``: ``[{"id", "name", "arguments"}]`` of the reply's calls, in order.
    """

    calls: list[PendingCall]
    type: Literal["approval_required"] = "approval_required"


@dataclass
class ToolResultEvent:
    """A tool's result (``is_error`` for failures, timeouts and bad arguments)."""

    id: str
    name: str
    content: str
    is_error: bool
    type: Literal["tool_result"] = "tool_result"


@dataclass
class UsageEvent:
    """Ledger of one model call, right after it finished."""

    ledger: Ledger
    type: Literal["usage"] = "usage"


@dataclass
class ToolCallRecord:
    """One executed tool call of a run."""

    id: str
    name: str
    arguments: dict[str, JSON]
    step: int
    error: str | None = None


@dataclass
class ToolResultRecord:
    """One tool result of a run."""

    id: str
    name: str
    content: str
    is_error: bool
    step: int
    duration_ms: float = 0.0


@dataclass
class RunResult:
    """Outcome of one user turn.

    Attributes:
        answer: final answer text (content of the last reply).
        reasoning: reasoning text of every step, joined.
        steps: model calls made.
        tool_calls / tool_results: in call order.
        usage: the run's ledger (sum of the per-call ledgers in ``usage.calls``).
        timings: ms: ``total``, ``model``, ``tools``, ``retrieval``, ``memory``, ``ttft`` (first call),
            ``query_rewrite`` (when a rewrite was made).
        final_state: ``done`` | ``max_steps`` | ``interrupted`` | ``error``.
        error: message when ``final_state == "error"``.
        compactions: compaction markers appended during this run.
        pending: with ``final_state == "awaiting_approval"``, the reply's calls waiting for a
            decision (``[{"id", "name", "arguments"}]``; see :mod:`loom.orchestrator.approval`).
        after_turn_usage: ledger of the calls made after the turn for the next one (the
            compaction's summary and prefill; ``loom.orchestrator.compaction_hooks``), ``None`` when none.
        retrieved: this turn's retrieval hits as shown to the model, in rank order
            (each with ``.document``, ``.section``, ``.text``), then those in ``attributed``; empty
            without auto retrieval.
        rewritten_query: the query a follow-up was searched with instead of the message as typed
            (``loom.orchestrator.condense``): the previous user message joined to it, or the model's
            standalone rewrite; ``None`` when the message was searched as typed.
        finish_reason: why the last model call ended, as the engine says (vLLM's and
            OpenAI's names): ``stop`` (end-of-sequence token or stop string), ``length``
            (``max_tokens`` cut the reply), ``abort``; ``None`` before any call; ``stop`` for a turn
            answered ``no_match_answer`` (with or without a model call: that answer is whole).
        no_match: the turn searched and no hit was related to the message (under the agent's
            ``similarity_cutoff``, ``loom.orchestrator.relevance``): nothing was shown, and with
            ``no_match_answer`` set that text is the answer and no model call was made.
        unsupported: with ``no_match_answer`` set, the model's answer to a turn that was shown
            passages was ungrounded (``loom.orchestrator.grounding``: these claims of it occur in
            none of the passages, or ``["(restates the question)"]``), so ``answer`` is
            ``no_match_answer`` instead; empty otherwise.
        unknown_terms: with ``no_match_answer`` set, what the message names that the index never uses
            (``loom.retrieval.terms``: code names no chunk holds, words that are not common English and
            whose stem no chunk holds), so the documents cannot answer it: ``answer`` is
            ``no_match_answer`` and no model call was made; empty otherwise.
        widened: with ``no_match_answer`` set, the model's first answer, made from the top
            ``first_answer_k`` relevant hits, was ungrounded, so it answered again shown every relevant
            hit (``retrieved``; ``loom.orchestrator.answer_check``): two model calls in ``usage``.
        attributed: with ``no_match_answer`` set, the hits the attribution search found after the answer
            was written that state the names the shown passages lacked (``loom.orchestrator.answer_check``):
            the answer stands on them, and they end ``retrieved``; empty otherwise.
        rejected: with ``no_match_answer`` set, the model's answers that the check refused, in order
            (the narrow one before ``widened``, then the wide one when ``unsupported``): never shown
            nor stored in the session, kept here to see why a turn said ``no_match_answer``.
        verifier_margins: with an ``AnswerVerifier``, its ``Verdict.margin`` for each answer it judged, in
            order (``None``: the prompt did not fit its window); an answer under its threshold is
            rejected as an ungrounded one is (``loom.orchestrator.answer_verifier``).
    """

    answer: str = ""
    reasoning: str = ""
    steps: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    tool_results: list[ToolResultRecord] = field(default_factory=list)
    usage: Ledger = field(default_factory=Ledger)
    timings: dict[str, float] = field(default_factory=dict)
    final_state: FinalState = "done"
    error: str | None = None
    compactions: int = 0
    after_turn_usage: Ledger | None = None
    pending: list[PendingCall] = field(default_factory=list)
    retrieved: list[SearchHit] = field(default_factory=list)
    rewritten_query: str | None = None
    finish_reason: str | None = None
    no_match: bool = False
    unsupported: list[str] = field(default_factory=list)
    unknown_terms: list[str] = field(default_factory=list)
    widened: bool = False
    attributed: list[SearchHit] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    verifier_margins: list[float | None] = field(default_factory=list)


@dataclass
class DoneEvent:
    """Last event of a stream."""

    result: RunResult
    type: Literal["done"] = "done"


AgentEvent = (ReasoningDelta | ContentDelta | ToolCallEvent | ApprovalRequiredEvent | ToolResultEvent
              | UsageEvent | DoneEvent)
"""What ``Agent.stream`` yields; ``type`` tells them apart (a ``DoneEvent`` comes last)."""
