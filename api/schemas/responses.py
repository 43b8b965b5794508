"""OpenAI Responses API models (``/v1/responses``).

Field names and shapes follow OpenAI's API reference for ``responses.create``:
``input`` as a string or a list of items (messages with ``input_text`` /
``output_text`` parts, ``function_call`` and ``function_call_output`` items,
``reasoning`` items), ``instructions``, function ``tools`` (the flat shape:
``{"type": "function", "name": ..., "parameters": ...}``), ``tool_choice``,
``text.format`` (``text`` / ``json_object`` / ``json_schema``),
``max_output_tokens``, ``store`` and ``previous_response_id``.  Built-in tools
(web search, file search, computer use) are not served: such a tool is a 400
naming it.  Unknown fields are ignored and logged, or a 400 on a ``--strict``
server, as for chat completions (``loom.api.schemas.base``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from loom.api.schemas.base import RequestModel
from loom.api.schemas.cache_control import CacheControl
from loom.json_types import JSONObject


class InputText(RequestModel):
    """A text part of an input message (``output_text`` in an assistant message sent back)."""

    type: Literal["input_text", "output_text", "text"]
    text: str


class InputMessage(RequestModel):
    """A message item; ``type`` may be left out (``{"role": "user", "content": "..."}``)."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputText]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(RequestModel):
    """A function call the model made earlier (sent back with its output)."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(RequestModel):
    """The caller's result of a function call, answering ``call_id``."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[InputText]
    id: str | None = None
    status: str | None = None


class ReasoningText(RequestModel):
    """A reasoning text or summary part."""

    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(RequestModel):
    """The model's earlier reasoning, sent back (its text rides with the next assistant message)."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


InputItem = InputMessage | FunctionCallItem | FunctionCallOutputItem | ReasoningItem


class FunctionTool(RequestModel):
    """A function tool (the Responses API's flat shape)."""

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class FunctionToolChoice(RequestModel):
    """``{"type": "function", "name": ...}``: call exactly this tool."""

    type: Literal["function"]
    name: str


class TextFormat(RequestModel):
    """``text.format``: plain text, any JSON object, or JSON matching ``schema``."""

    type: Literal["text", "json_object", "json_schema"]
    name: str = "response"
    description: str | None = None
    schema_: JSONObject | None = Field(default=None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)


class TextConfig(RequestModel):
    """``text``: the output's format."""

    format: TextFormat | None = None


class ResponseCreateRequest(RequestModel):
    """Body of ``POST /v1/responses``."""

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | FunctionToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    store: bool = True
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=200)
    stream: bool = False
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(default=None, max_length=16)
    user: str | None = None
    cache_salt: str | None = Field(default=None, min_length=1, max_length=256, description=(
        "vLLM's per-request salt of the prefix cache's block hashes."))
    cache_control: CacheControl | None = Field(default=None, description=(
        "Keep this call's prompt and reply in the KV pool for `ttl` (one pin per API key)."))


# ---- the response object ----------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class OutputText(_Out):
    """The model's text in an output message."""

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[JSONObject] = Field(default_factory=list)


class OutputMessage(_Out):
    """An assistant message item of ``output``."""

    type: Literal["message"] = "message"
    id: str
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class OutputFunctionCall(_Out):
    """A function call item of ``output``: run it and send back a ``function_call_output``."""

    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str  # a JSON-encoded object
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


class OutputReasoning(_Out):
    """The model's reasoning (its ``<think>`` text), as a ``reasoning_text`` part."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[JSONObject] = Field(default_factory=list)
    content: list[JSONObject] = Field(default_factory=list)


OutputItem = OutputMessage | OutputFunctionCall | OutputReasoning


class InputTokensDetails(BaseModel):
    """``cached_tokens``: prompt tokens served from the prefix cache."""

    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    """``reasoning_tokens``: output tokens inside the model's reasoning block."""

    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    """Token counts of one response (``input_tokens`` includes the cached ones)."""

    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(BaseModel):
    """Why a response is ``incomplete``."""

    reason: Literal["max_output_tokens"]


class ResponseObject(_Out):
    """A response (``object: "response"``), as created, streamed at the end, and retrieved."""

    id: str
    object: Literal["response"] = "response"
    created_at: int  # Unix seconds
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[JSONObject] = Field(default_factory=list)
    tool_choice: str | JSONObject = "auto"
    parallel_tool_calls: bool = True
    text: JSONObject = Field(default_factory=lambda: {"format": {"type": "text"}})
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    previous_response_id: str | None = None
    store: bool = True
    metadata: dict[str, str] = Field(default_factory=dict)
    usage: ResponseUsage | None = None
    incomplete_details: IncompleteDetails | None = None
    error: JSONObject | None = None


class ResponseDeleted(BaseModel):
    """Answer of ``DELETE /v1/responses/{id}``."""

    id: str
    object: Literal["response"] = "response"
    deleted: bool = True
