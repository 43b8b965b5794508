"""Turn a chat-completions request into prompt token ids and ``SamplingParams``.

This module only reads the request (OpenAI messages, tools, ``tool_choice``,
``response_format``) and checks it, naming the field at fault; the prompt is
built by the orchestrator, as the agent's is: messages are rendered once
through the model's own chat template with the tool schemas injected the
model's way (``orchestrator.template.prompt_ids``), and
``tool_choice="required"`` or a named tool forces exactly one call in the
model's own format (``orchestrator.formats.grammar.force_call``, llguidance
Lark grammar from the same format object), so even a random model emits a
valid call.  ``response_format`` ``json_object`` / ``json_schema`` constrain
the whole output the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from api.schemas.chat import AssistantMessage, ChatCompletionRequest, Content, NamedToolChoice, ToolMessage
from orchestrator.formats import ToolCallFormat, detect_format
from orchestrator.formats.grammar import compact, force_call
from orchestrator.parsers import HERMES_THINK
from orchestrator.template import prompt_ids
from runtime.errors import InvalidRequestError
from runtime.sampling_params import SamplingParams


def _text(content: Content | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)


def _arguments(raw: str, param: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"tool call arguments are not valid JSON: {exc}", param=param) from exc
    if not isinstance(value, dict):
        raise InvalidRequestError("tool call arguments must be a JSON object", param=param)
    return value


def template_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """Messages as the chat template takes them (plain text, argument dicts, tool names).

    Raises:
        InvalidRequestError: a tool message answers no earlier assistant tool call,
            or a call's arguments are not a JSON object (``param`` names the field).
    """
    out: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # tool_call_id -> function name, from earlier assistant turns
    for i, m in enumerate(req.messages):
        if isinstance(m, AssistantMessage):
            msg: dict[str, Any] = {"role": "assistant", "content": _text(m.content)}
            if m.reasoning_content:
                msg["reasoning_content"] = m.reasoning_content
            if m.tool_calls:
                msg["tool_calls"] = []
                for j, c in enumerate(m.tool_calls):
                    args = _arguments(c.function.arguments, f"messages.{i}.tool_calls.{j}.function.arguments")
                    calls[c.id] = c.function.name
                    msg["tool_calls"].append(
                        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": args}}
                    )
            out.append(msg)
        elif isinstance(m, ToolMessage):
            if m.tool_call_id not in calls:
                raise InvalidRequestError(
                    f"tool message answers tool_call_id {m.tool_call_id!r}, which no earlier "
                    "assistant message called",
                    param=f"messages.{i}.tool_call_id",
                )
            out.append({"role": "tool", "content": _text(m.content), "tool_call_id": m.tool_call_id,
                        "name": calls[m.tool_call_id]})
        else:
            role = "system" if m.role == "developer" else m.role
            out.append({"role": role, "content": _text(m.content)})
    return out


def tool_dicts(req: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The request's tools as plain OpenAI dicts (what the template and schema builder take)."""
    if not req.tools:
        return None
    return [t.model_dump(exclude_none=True) for t in req.tools]


def forced_tool(req: ChatCompletionRequest) -> tuple[bool, str | None]:
    """(must call a tool, the tool's name when one is named).

    Raises:
        InvalidRequestError: ``tool_choice`` requires a tool but ``tools`` is empty,
            or names a tool that is not in ``tools``.
    """
    choice = req.tool_choice
    if choice is None or choice in ("auto", "none"):
        return False, None
    names = [t.function.name for t in req.tools or []]
    if not names:
        raise InvalidRequestError("tool_choice requires a non-empty 'tools' list", param="tool_choice")
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            raise InvalidRequestError(
                f"tool_choice names {choice.function.name!r}, which is not in 'tools'",
                param="tool_choice.function.name",
            )
        return True, choice.function.name
    return True, None


@dataclass
class PreparedChat:
    """What the engine needs for one completion and how to read its output."""

    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    forced_tool_call: bool  # output is the JSON of exactly one tool call
    json_output: bool  # output is constrained JSON (response_format)
    parse_tools: bool  # look for tool-call blocks in free text
    fmt: ToolCallFormat = HERMES_THINK  # the model's tool-call / reasoning format
    tool_names: frozenset[str] = frozenset()  # tools the request offers


def check_schema(schema: dict[str, Any], param: str) -> None:
    """Reject a JSON schema that is not one (400 naming ``param``) before it reaches the engine."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidRequestError(f"invalid JSON schema: {exc.message}", param=param) from exc


def _response_format(req: ChatCompletionRequest) -> Any:
    """``StructuredOutputParams`` of ``response_format`` (``None`` for plain text)."""
    from runtime.structured_output import StructuredOutputParams

    rf = req.response_format
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        return StructuredOutputParams(json=compact({"type": "object"}))
    if rf.json_schema is None:
        raise InvalidRequestError("response_format of type json_schema needs 'json_schema'",
                                  param="response_format.json_schema")
    schema = rf.json_schema.schema_ or {"type": "object"}
    check_schema(schema, "response_format.json_schema.schema")
    return StructuredOutputParams(json=compact(schema))


def prepare(req: ChatCompletionRequest, tokenizer: Any, default_max_tokens: int,
            max_model_len: int | None, fmt: ToolCallFormat | None = None) -> PreparedChat:
    """Prompt ids and ``SamplingParams`` for a request.

    ``fmt`` is the model's tool-call format (detected from ``tokenizer`` when ``None``).

    Raises:
        InvalidRequestError / ValueError: invalid combination or value (field named).
        ContextLengthError: the prompt alone fills the model window.
    """
    from runtime.errors import ContextLengthError

    if req.response_format is not None and req.response_format.type != "text" and req.tools \
            and req.tool_choice not in (None, "none"):
        raise InvalidRequestError("response_format cannot be combined with tools unless "
                                  "tool_choice is 'none'", param="response_format")
    tools = tool_dicts(req)
    for i, t in enumerate(req.tools or []):
        if t.function.parameters is not None:
            check_schema(t.function.parameters, f"tools.{i}.function.parameters")
    forced, name = forced_tool(req)
    fmt = fmt if fmt is not None else detect_format(tokenizer)
    messages = template_messages(req)
    ids = prompt_ids(tokenizer, fmt, messages, tools)
    if max_model_len is not None and len(ids) >= max_model_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens, but the "
            f"messages use {len(ids)} tokens.", param="messages")
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is None:
        max_tokens = default_max_tokens
        if max_model_len is not None:
            max_tokens = max(1, min(max_tokens, max_model_len - len(ids)))
    elif max_model_len is not None and len(ids) + max_tokens > max_model_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(ids) + max_tokens} tokens ({len(ids)} in the messages, {max_tokens} in the "
            "completion).", param="max_tokens")
    structured = None if forced else _response_format(req)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    kwargs: dict[str, Any] = {
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "max_tokens": max_tokens,
        "stop": [] if structured is not None else stop,
        "seed": req.seed,
        "skip_special_tokens": False,  # the parser needs <think> / <tool_call> markers
        "structured_output": structured,
    }
    for opt in ("top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if getattr(req, opt) is not None:
            kwargs[opt] = getattr(req, opt)
    params = SamplingParams(**kwargs)
    if forced:  # the user's schemas exactly as given (bound=False): an API must not narrow them
        params = force_call(params, fmt, tools or [], name)
    return PreparedChat(
        prompt_token_ids=ids,
        sampling_params=params,
        forced_tool_call=forced,
        json_output=structured is not None,
        parse_tools=bool(tools) and req.tool_choice != "none" and not forced,
        fmt=fmt,
        tool_names=frozenset(t.function.name for t in req.tools or []),
    )
