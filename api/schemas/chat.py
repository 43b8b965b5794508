"""OpenAI chat-completions request and response models (``/v1/chat/completions``).

Field names and shapes follow OpenAI's API reference; ``reasoning_content`` on
messages and deltas follows vLLM / DeepSeek, and so do the extensions a vLLM
server accepts (``top_k``, ``min_p``, ``repetition_penalty``, ``min_tokens``,
``stop_token_ids``, ``ignore_eos``, ``chat_template_kwargs``,
``structured_outputs`` and the older ``guided_*`` fields,
``stream_options.continuous_usage_stats``).  Unknown fields are ignored and
logged, or a 400 naming them on a ``--strict`` server (``loom.api.schemas.base``);
a known field with a value of the wrong type is always a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loom.api.schemas.base import RequestModel
from loom.api.schemas.cache_control import CacheControl
from loom.json_types import JSONObject


def integral(value: Any) -> Any:
    """``5.0`` as ``5`` (JSON Schema's integer includes it; strict validation alone would refuse it)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class _Strict(RequestModel):
    # strict types: `"stream": 0` or `"max_tokens": "5"` is a 400, as the documented types say
    pass


class TextPart(_Strict):
    """A text content part (``{"type": "text", "text": ...}``)."""

    type: Literal["text"]
    text: str


Content = str | list[TextPart]


class FunctionCall(_Strict):
    """A call's function: ``arguments`` is a JSON-encoded object, as in OpenAI's API."""

    name: str
    arguments: str


class ToolCall(_Strict):
    """An assistant's tool call."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    """System (or ``developer``) instructions."""

    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class UserMessage(_Strict):
    """A user turn."""

    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Strict):
    """An earlier assistant turn (content, reasoning and/or tool calls)."""

    role: Literal["assistant"]
    content: Content | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None


class ToolMessage(_Strict):
    """A tool's result, answering the assistant call with ``tool_call_id``."""

    role: Literal["tool"]
    content: Content
    tool_call_id: str


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]


class FunctionDef(_Strict):
    """A tool's function: name, description and JSON-schema parameters."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class ToolDef(_Strict):
    """An OpenAI tool (only ``function`` tools exist)."""

    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Strict):
    """``{"name": ...}`` inside a named ``tool_choice``."""

    name: str


class NamedToolChoice(_Strict):
    """``tool_choice={"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaSpec(_Strict):
    """``response_format.json_schema``: a name and a JSON schema."""

    name: str = "response"
    description: str | None = None
    schema_: JSONObject = Field(default_factory=dict, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)


class ResponseFormat(_Strict):
    """``text``, ``json_object`` or ``json_schema`` (enforced by constrained decoding)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class StreamOptions(_Strict):
    """``include_usage`` adds a last chunk with ``usage`` (and no choices);
    ``continuous_usage_stats`` (vLLM) puts the cumulative ``usage`` on every chunk."""

    include_usage: bool = False
    continuous_usage_stats: bool = False


class StructuredOutputs(_Strict):
    """vLLM's ``structured_outputs``: exactly one of ``json`` (a JSON schema), ``regex``
    (Rust regex syntax, as llguidance takes it), ``choice`` (one of these strings),
    ``grammar`` (a Lark grammar in llguidance's dialect) or ``json_object``."""

    json_: JSONObject | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = Field(default=None, min_length=1)
    grammar: str | None = None
    json_object: bool | None = None

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)


MAX_N = 128  # choices per request (vLLM sets no bound; each one is an engine request)


class ChatCompletionRequest(_Strict):
    """Body of ``POST /v1/chat/completions``."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: Annotated[str, Field(min_length=1)] | list[Annotated[str, Field(min_length=1)]] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1, description="int64.")
    cache_salt: str | None = Field(default=None, min_length=1, max_length=256, description=(
        "vLLM's cache_salt: only requests with the same salt (and, by default, the same API key) share "
        "cached prompt prefixes."))
    n: int | None = Field(default=None, ge=1, le=MAX_N, description="Choices (engine requests sharing "
                          f"the prompt's KV blocks); at most {MAX_N}.")
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = Field(
        default=None, description="Token id (as a string) -> bias added to its logit, in [-100, 100].")
    response_format: ResponseFormat | None = None
    user: str | None = None
    cache_control: CacheControl | None = Field(default=None, description=(
        "Keep this call's prompt and reply in the KV pool for `ttl` (`{\"type\": \"ephemeral\", \"ttl\": "
        "\"5m\"}`): one pin per API key, the latest call's."))
    # vLLM extensions
    min_tokens: int | None = Field(default=None, ge=0)
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    return_token_ids: bool | None = Field(
        default=None, description="Include `prompt_token_ids` and each choice's `token_ids` (vLLM); "
        "streamed: the prompt's in the first chunk, each chunk's new ids in its choice.")
    chat_template_kwargs: JSONObject | None = Field(
        default=None, description="Extra keyword arguments for the chat template (vLLM), e.g. "
        '`{"enable_thinking": false}`.')
    structured_outputs: StructuredOutputs | None = None
    guided_json: JSONObject | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = Field(default=None, min_length=1)
    guided_grammar: str | None = None

    _integral = field_validator("top_k", "max_tokens", "max_completion_tokens", "seed", "n", "top_logprobs",
                                "min_tokens", mode="before")(integral)


class PromptTokensDetails(BaseModel):
    """Prompt tokens served from the prefix cache."""

    cached_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    """Completion tokens spent inside ``<think>`` reasoning."""

    reasoning_tokens: int = 0


class Usage(BaseModel):
    """Token counts of one completion (OpenAI ``usage``)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = Field(
        default_factory=CompletionTokensDetails
    )


class ResponseMessage(BaseModel):
    """The assistant message of a non-streamed choice."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


FinishReason = Literal["stop", "length", "tool_calls", "abort"]


class ChoiceError(BaseModel):
    """Why a choice ended without what the request forced (e.g. ``max_tokens`` cut a forced
    tool call); OpenAI's error-body fields."""

    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class TopLogprob(BaseModel):
    """One of the most likely tokens at a position: text, natural-log probability, UTF-8 bytes."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    """An output token's log-probability and the ``top_logprobs`` most likely tokens there
    (raw model log-probabilities, before temperature or penalties, as vLLM's default)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    """``choices[i].logprobs``: one entry per output token."""

    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


class Choice(BaseModel):
    """One of the ``n`` choices."""

    index: int = 0
    message: ResponseMessage
    finish_reason: FinishReason | None = None
    logprobs: ChoiceLogprobs | None = None
    error: ChoiceError | None = None
    token_ids: list[int] | None = None  # vLLM's return_token_ids: the output ids (eos included)


class ChatCompletion(BaseModel):
    """Response of a non-streamed chat completion."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    prompt_token_ids: list[int] | None = None  # vLLM's return_token_ids


class DeltaFunction(BaseModel):
    """Streamed piece of a tool call's function (name once, then argument text)."""

    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(BaseModel):
    """Streamed tool call, addressed by ``index``."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunction


class Delta(BaseModel):
    """What a stream chunk adds to the message."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(BaseModel):
    """A streamed choice."""

    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: ChoiceLogprobs | None = None
    error: ChoiceError | None = None
    token_ids: list[int] | None = None  # return_token_ids: the ids this chunk delivers


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = None  # return_token_ids: in the first chunk only


class ModelCard(BaseModel):
    """An entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "loom"
    max_model_len: int | None = None


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
