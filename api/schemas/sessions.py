"""Models of the sessions resource (``/v1/sessions``): agent turns with stored history."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.chat import NamedToolChoice

BUILTIN_TOOLS = ("calculator", "recall", "remember", "search_documents")
ToolName = Literal["calculator", "recall", "remember", "search_documents"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionSampling(_Strict):
    """Sampling of every model call of the session's turns (``SamplingParams`` names)."""

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    max_tokens: int = Field(default=256, ge=1)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)


class SessionCreate(_Strict):
    """Body of ``POST /v1/sessions``."""

    system_prompt: str = ""
    tools: list[ToolName] = Field(default_factory=list,
                                  description=f"Built-in tools to enable: {', '.join(BUILTIN_TOOLS)}.")
    index: bool = Field(default=False, description="Ground turns in the owner's documents "
                        "(the server's index): automatic retrieval before each turn.")
    condense_question: bool = Field(default=True, description="With index: rewrite a follow-up into a "
                                    "standalone question with the model before retrieving (its tokens are "
                                    "the ledger's query_rewrite / rewritten_query classes).")
    memory_namespace: str | None = Field(default=None, max_length=200,
                                         description="Long-term memory namespace (per owner).")
    sampling: SessionSampling = Field(default_factory=SessionSampling)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice = "auto"
    max_steps: int | None = Field(default=None, ge=1, le=32)
    metadata: dict[str, Any] = Field(default_factory=dict)


class SessionOut(BaseModel):
    """A session as the API returns it."""

    id: str
    object: Literal["session"] = "session"
    created_at: dt.datetime
    updated_at: dt.datetime
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


class TurnOut(BaseModel):
    """One stored turn: the user's message, the agent's answer, its state and ledger.

    ``state``: ``running`` | ``done`` | ``max_steps`` | ``interrupted`` | ``error``.
    ``usage`` is OpenAI-shaped; ``ledger`` splits tokens, time (ms) and cost by class.
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
    usage: dict[str, Any] | None = None
    ledger: dict[str, Any] | None = None
    error: str | None = None
    created_at: dt.datetime
    finished_at: dt.datetime | None = None


class TurnList(BaseModel):
    """``GET /v1/sessions/{id}/messages``."""

    object: Literal["list"] = "list"
    data: list[TurnOut]


class Deleted(BaseModel):
    """Answer of a DELETE."""

    id: str
    object: str
    deleted: bool = True
