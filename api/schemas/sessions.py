"""Models of the sessions resource (``/v1/sessions``): agent turns with stored history."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from loom.api.schemas.cache_control import CacheControl
from loom.api.schemas.chat import NamedToolChoice, ToolDef, integral
from loom.json_types import JSONObject
from loom.orchestrator.parts import DEFAULT_ATTRIBUTION_K
from loom.orchestrator.chat_agent import DOCS_SYSTEM
from loom.orchestrator.relevance import NOT_FOUND_ANSWER

BUILTIN_TOOLS = ("calculator", "recall", "remember", "search_documents")
#: A built-in tool, or ``mcp:<server>`` (every tool of a configured MCP server) / ``mcp:<server>/<tool>``.
ToolName = Literal["calculator", "recall", "remember", "search_documents"] | Annotated[
    str, StringConstraints(pattern=r"^mcp:[A-Za-z0-9_.-]{1,64}(/[A-Za-z0-9_.-]{1,128})?$")]


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


# The store keeps naive UTC; answers carry the offset (RFC 3339 date-time, as documented)
Timestamp = Annotated[dt.datetime, AfterValidator(_utc)]


class _Strict(BaseModel):
    # strict: `"stream": 0` or `"max_tokens": "5"` is a 400, as the documented types say
    model_config = ConfigDict(extra="forbid", strict=True)


class SessionSampling(_Strict):
    """Sampling of every model call of the session's turns (``SamplingParams`` names).

    Greedy and without penalties by default: each penalty lost answers on served documentation
    questions (docs/serving.md, "Sessions")."""

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    max_tokens: int = Field(default=256, ge=1)
    repetition_penalty: float = Field(default=1.0, gt=0.0, description="CTRL-style (Keskar et al. 2019) on the "
                                      "tokens of the prompt and the output: > 1 discourages repeats, 1 is off.")
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0, description="OpenAI's: subtracted from a "
                                     "token's logit per time it occurs in the output.")
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0, description="OpenAI's: subtracted once from "
                                    "the logit of every token the output holds.")
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1, description="int64.")
    stop: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)

    _integral = field_validator("top_k", "max_tokens", "seed", mode="before")(integral)


class SessionCacheControl(CacheControl):
    """A session's ``cache_control`` (unknown fields are a 400, as everywhere in a session's config)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class SessionCreate(_Strict):
    """Body of ``POST /v1/sessions``."""

    system_prompt: str = Field(default="", description="Not given, a session with index and neither tools nor "
                               "memory answers in the style `loom chat` asks of its documents: "
                               f"{DOCS_SYSTEM.strip()!r}")
    tools: list[ToolName] = Field(default_factory=list,
                                  description=f"Tools to enable: built-ins ({', '.join(BUILTIN_TOOLS)}) and "
                                  "`mcp:<server>` or `mcp:<server>/<tool>` from the server's MCP servers.")
    client_tools: list[ToolDef] = Field(default_factory=list, description="Tools the client runs (OpenAI "
                                        "function definitions): a call pauses the turn (awaiting_approval) and "
                                        "the client posts its output as a `result` decision.")
    approval: list[str] = Field(default_factory=list, description="Tools (of `tools`) whose calls wait for a "
                                "decision: the turn pauses (state awaiting_approval) until POST "
                                "/v1/sessions/{id}/approvals (LangGraph's interrupt, Letta's requires_approval).")
    index: bool = Field(default=False, description="Ground turns in the owner's documents "
                        "(the server's index): automatic retrieval before each turn.")
    similarity_cutoff: Annotated[float, Field(ge=-1.0, le=1.0)] | Literal["auto"] | None = Field(
        default="auto", description="With index: the cosine similarity under which a retrieved section is not "
        "shown (`auto`: the embedder's measured cutoff, 0.425 for MiniLM; null: every section is shown). A short "
        "question can score under it against a section that covers several topics.")
    no_match_answer: str | None = Field(
        default=None, min_length=1, max_length=1000, description="With index, a documentation-QA session: this "
        "text is the answer when nothing retrieved is related to the message (no model call), and replaces an "
        "answer that names code, quoted values or numbers none of the shown sections holds, or only restates "
        "the question (held until checked, also when streamed); null: the model always answers.  Not given, a "
        f"session with index and neither tools nor memory is a documentation-QA session: {NOT_FOUND_ANSWER!r}.")
    first_answer_k: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=1, description="With no_match_answer: the top related sections the first answer is made from; "
        "when that answer is replaced, the model answers once more from every related section before "
        "no_match_answer is given (a second model call); null: every section from the start.")
    attribution_k: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=DEFAULT_ATTRIBUTION_K, description="With no_match_answer: before an answer is replaced for naming "
        "what the sections shown lack, this many sections are searched for (the message and those names); when "
        "related sections not shown hold every such name, the answer stands and cites them (retrieval.attributed); "
        "null: never.")
    condense_question: bool | Literal["history", "model"] = Field(
        default="history", description="With index, how a turn after the first is searched: `history` (or true: "
        "the previous user message and this one joined, no model call), `model` (the model rewrites it into a "
        "standalone question, fused with the message as typed; its tokens are the ledger's query_rewrite / "
        "rewritten_query classes), false (the message as typed).")
    max_history_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="Tokens of history a turn keeps for the next one: the oldest turns are dropped "
        "first; null: all the window leaves.")
    memory_namespace: str | None = Field(default=None, max_length=200,
                                         description="Long-term memory namespace (per owner).")
    sampling: SessionSampling = Field(default_factory=SessionSampling)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice = "auto"
    max_steps: int | None = Field(default=None, ge=1, le=32)
    metadata: JSONObject = Field(default_factory=dict)
    cache_control: SessionCacheControl | None = Field(default=None, description=(
        "Keep the session's KV in the pool for `ttl` after each model call (`{\"type\": \"ephemeral\", "
        "\"ttl\": \"5m\"}`), so its next turn finds its prefix cached while other sessions fill the pool; "
        "without it the KV is kept through tool calls only."))

    _integral = field_validator("max_steps", mode="before")(integral)

    @model_validator(mode="after")
    def _documentation_qa_by_default(self) -> SessionCreate:
        """A session that only reads the index (no tools, no memory) says when its documents do not hold an
        answer instead of guessing, unless ``no_match_answer`` is given (null: the model always answers), and
        answers in a few sentences with at most one example (:data:`~loom.orchestrator.chat_agent.DOCS_SYSTEM`)
        unless ``system_prompt`` is given.  Measured through ``loom serve`` in docs/serving.md
        ("Documentation-QA sessions") and docs/evaluations.md ("The system message when a session has none")."""
        if self.index and not self.tools and not self.client_tools and not self.memory_namespace:
            if "no_match_answer" not in self.model_fields_set:
                self.no_match_answer = NOT_FOUND_ANSWER
            if "system_prompt" not in self.model_fields_set:
                self.system_prompt = DOCS_SYSTEM.strip()
        return self


class SessionOut(BaseModel):
    """A session as the API returns it."""

    id: str
    object: Literal["session"] = "session"
    created_at: Timestamp
    updated_at: Timestamp
    num_turns: int
    config: SessionCreate


class SessionList(BaseModel):
    """``GET /v1/sessions``."""

    object: Literal["list"] = "list"
    data: list[SessionOut]


class MessageCreate(_Strict):
    """Body of ``POST /v1/sessions/{id}/messages``: one user message."""

    content: str = Field(min_length=1)
    stream: bool = False
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None


class Decision(_Strict):
    """A decision on one pending tool call (``loom.orchestrator.approval``)."""

    tool_call_id: str = Field(min_length=1)
    decision: Literal["approve", "edit", "reject", "result"]
    arguments: JSONObject | None = Field(default=None, description="edit: the arguments to run it with.")
    reason: str | None = Field(default=None, description="reject: shown to the model in the tool result.")
    output: str | None = Field(default=None, description="result: the output of a call the client ran.")


class ApprovalCreate(_Strict):
    """Body of ``POST /v1/sessions/{id}/approvals``: decisions on the paused turn's tool calls."""

    decisions: list[Decision] = Field(min_length=1)
    stream: bool = False


class TurnRetrieval(BaseModel):
    """What a turn's search over the owner's documents showed the model (sessions with ``index``)."""

    sources: list[str] = Field(description="The sections shown, `document - section`, in rank order, each once "
                               "(a section several of whose chunks were shown is listed at its best rank), "
                               "then those in `attributed`.")
    no_match: bool = Field(description="Nothing in the index was related to the message (under the retriever's "
                           "similarity cutoff): no section was shown and the answer is not from the documents.")
    searched_as: str | None = Field(default=None, description="The query a follow-up was searched with instead "
                                    "of the message as typed (the previous message joined to it, or the model's "
                                    "rewrite); null: as typed.")
    unsupported: list[str] = Field(default_factory=list, description="With `no_match_answer`: why the model's "
                                   "answer was replaced by it (its claims that no shown section holds, or "
                                   "`(restates the question)`); empty when it was not.")
    unknown_terms: list[str] = Field(default_factory=list, description="With `no_match_answer`: the words of "
                                     "the message that no indexed section uses (not code, not common English), "
                                     "for which it was answered `no_match_answer` without a model call.")
    attributed: list[str] = Field(default_factory=list, description="With `no_match_answer`: the sections "
                                  "(also in `sources`) that the model was not shown but that state the names "
                                  "of its answer, found after it was written (`attribution_k`); the answer "
                                  "stands on them.")
    widened: bool = Field(default=False, description="With `no_match_answer`: the first answer, made from the "
                          "top `first_answer_k` sections, was replaced, and the model answered again from every "
                          "related section (`sources`).")


class TurnOut(BaseModel):
    """One stored turn: the user's message, the agent's answer, its state and ledger.

    ``state``: ``running`` | ``done`` | ``max_steps`` | ``interrupted`` | ``error`` |
    ``awaiting_approval`` (``pending_tool_calls`` wait for ``POST /v1/sessions/{id}/approvals``).
    ``usage`` is OpenAI-shaped; ``ledger`` splits tokens, time (ms) and cost by class.
    ``ledger.after_turn``, when present, is the ledger of the calls made after the answer
    to prepare the next turn (a compaction's summary and the prefill of the compacted
    prompt; ``loom.orchestrator.compaction_hooks``): engine work of this turn, not in ``usage``.
    """

    object: Literal["session.turn"] = "session.turn"
    session_id: str
    index: int
    user_message: str
    state: str
    answer: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] = Field(default_factory=list)
    tool_results: list[Any] = Field(default_factory=list)
    usage: JSONObject | None = None
    ledger: JSONObject | None = None
    error: str | None = None
    finish_reason: str | None = Field(default=None, description="Why the turn's last model call ended: stop "
                                      "(the answer ended; also an answer that is the session's no_match_answer), "
                                      "length (cut at the session's max_tokens) or abort; null while running and "
                                      "when the turn ended without the agent's result (an error, a client that "
                                      "hung up).")
    pending_tool_calls: list[Any] = Field(default_factory=list, description="With state awaiting_approval: "
                                          "the calls waiting for a decision ({id, name, arguments}).")
    retrieval: TurnRetrieval | None = Field(default=None, description="What the turn's search showed the model; "
                                            "null when the session searches nothing or the turn has not finished.")
    created_at: Timestamp
    finished_at: Timestamp | None = None


class TurnList(BaseModel):
    """``GET /v1/sessions/{id}/messages``."""

    object: Literal["list"] = "list"
    data: list[TurnOut]


class Deleted(BaseModel):
    """Answer of a DELETE."""

    id: str
    object: str
    deleted: bool = True
