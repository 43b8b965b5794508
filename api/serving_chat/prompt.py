"""Turn a chat-completions request into prompt token ids and ``SamplingParams``.

This module only reads the request (OpenAI messages, tools, ``tool_choice``,
``response_format``) and checks it, naming the field at fault; the prompt is
built by the orchestrator, as the agent's is: messages are rendered once
through the model's own chat template with the tool schemas injected the
model's way (``loom.orchestrator.template.prompt_ids``), and
``tool_choice="required"`` or a named tool forces exactly one call in the
model's own format (``loom.orchestrator.formats.grammar.force_call``, llguidance
Lark grammar from the same format object), so even a random model emits a
valid call.  ``response_format`` ``json_object`` / ``json_schema`` and vLLM's
``structured_outputs`` / ``guided_*`` fields constrain the whole output the
same way (exactly one constraint per request, :func:`output_constraint`).
``chat_template_kwargs`` (vLLM) reach the template as extra keyword arguments.

:func:`prepare` renders, then tokenizes, in one place: that is where a
stateless prefix cache (reusing the generated ids of resent assistant text)
fits, between ``template_messages`` and ``prompt_ids``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loom.api.prompt_limits import check_text_chars
from loom.api.schemas.chat import AssistantMessage, ChatCompletionRequest, Content, NamedToolChoice, ToolMessage
from loom.json_types import JSONObject
from loom.orchestrator.formats import ToolCallFormat, detect_format
from loom.orchestrator.formats.grammar import compact, force_call
from loom.orchestrator.parsers import HERMES_THINK
from loom.orchestrator.protocols import Tokenizer
from loom.orchestrator.template import prompt_ids
from loom.runtime.errors import InvalidRequestError
from loom.runtime.sampling_params import SamplingParams


def _text(content: Content | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)


def _arguments(raw: str, param: str) -> JSONObject:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"tool call arguments are not valid JSON: {exc}", param=param) from exc
    if not isinstance(value, dict):
        raise InvalidRequestError("tool call arguments must be a JSON object", param=param)
    return value


def template_messages(req: ChatCompletionRequest) -> list[JSONObject]:
    """Messages as the chat template takes them (plain text, argument dicts, tool names).

    Raises:
        InvalidRequestError: a tool message answers no earlier assistant tool call,
            or a call's arguments are not a JSON object (``param`` names the field).
    """
    out: list[JSONObject] = []
    calls: dict[str, str] = {}  # tool_call_id -> function name, from earlier assistant turns
    for i, m in enumerate(req.messages):
        if isinstance(m, AssistantMessage):
            msg: JSONObject = {"role": "assistant", "content": _text(m.content)}
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


def tool_dicts(req: ChatCompletionRequest) -> list[JSONObject] | None:
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
    constrained: bool  # output is all content, constrained (response_format, structured_outputs, guided_*)
    parse_tools: bool  # look for tool-call blocks in free text
    fmt: ToolCallFormat = HERMES_THINK  # the model's tool-call / reasoning format
    tool_names: frozenset[str] = frozenset()  # tools the request offers
    n: int = 1  # choices, one engine request each
    top_logprobs: int | None = None  # None: no logprobs; else top tokens per position (0..20)
    constraint_field: str | None = None  # request field whose constraint the engine compiles
    return_token_ids: bool = False  # vLLM: prompt and output token ids in the response
    parallel_tool_calls: bool = True  # OpenAI: False keeps at most one tool call per reply


def check_schema(schema: JSONObject, param: str) -> None:
    """Reject a JSON schema that is not one (400 naming ``param``) before it reaches the engine."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidRequestError(f"invalid JSON schema: {exc.message}", param=param) from exc


def _schema(value: JSONObject | str, param: str) -> JSONObject:
    """A JSON schema given as an object or as JSON text, checked (400 naming ``param``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"{param} is not valid JSON: {exc}", param=param) from exc
        if not isinstance(value, dict):
            raise InvalidRequestError(f"{param} must be a JSON schema object", param=param)
    check_schema(value, param)
    return value


def _choice_grammar(choices: list[str]) -> str:
    """A Lark grammar whose output is exactly one of ``choices`` (vLLM's ``guided_choice``)."""
    return "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def _constraints(req: ChatCompletionRequest) -> list[tuple[str, Any]]:
    """``(request field, StructuredOutputParams)`` of every constraint the request sets."""
    from loom.runtime.structured_output import StructuredOutputParams as P

    found: list[tuple[str, Any]] = []
    rf = req.response_format
    if rf is not None and rf.type == "json_object":
        found.append(("response_format", P(json=compact({"type": "object"}))))
    elif rf is not None and rf.type == "json_schema":
        if rf.json_schema is None:
            raise InvalidRequestError("response_format of type json_schema needs 'json_schema'",
                                      param="response_format.json_schema")
        schema = _schema(rf.json_schema.schema_ or {"type": "object"}, "response_format.json_schema.schema")
        found.append(("response_format", P(json=compact(schema))))
    so = req.structured_outputs
    if so is not None:
        kinds = [k for k in ("json", "regex", "choice", "grammar", "json_object")
                 if getattr(so, "json_" if k == "json" else k) not in (None, False)]
        if len(kinds) != 1:
            raise InvalidRequestError("structured_outputs must set exactly one of json, regex, choice, grammar, "
                                      f"json_object; got {kinds or 'none'}", param="structured_outputs")
        found.append(_constraint(f"structured_outputs.{kinds[0]}", kinds[0], getattr(
            so, "json_" if kinds[0] == "json" else kinds[0])))
    for kind in ("json", "regex", "choice", "grammar"):
        value = getattr(req, f"guided_{kind}")
        if value is not None:
            found.append(_constraint(f"guided_{kind}", kind, value))
    return found


def _constraint(field: str, kind: str, value: Any) -> tuple[str, Any]:
    from loom.runtime.structured_output import StructuredOutputParams as P

    if kind == "json":
        return field, P(json=compact(_schema(value, field)))
    if kind == "json_object":
        return field, P(json=compact({"type": "object"}))
    if kind == "choice":
        return field, P(grammar=_choice_grammar(value))
    if not value:
        raise InvalidRequestError(f"{field} must not be empty", param=field)
    return field, (P(regex=value) if kind == "regex" else P(grammar=value))


def output_constraint(req: ChatCompletionRequest, forced: bool) -> tuple[str | None, Any]:
    """The request field that constrains the output and its ``StructuredOutputParams`` (or ``(None, None)``).

    Raises:
        InvalidRequestError: more than one constraint (``param`` names the
            second), a constraint beside tools the model may call, or a JSON
            schema that is not one.
    """
    found = _constraints(req)
    if len(found) > 1:
        raise InvalidRequestError(f"only one output constraint per request: got {found[0][0]!r} and "
                                  f"{found[1][0]!r}", param=found[1][0])
    if not found:
        return None, None
    field, params = found[0]
    if forced or (req.tools and req.tool_choice != "none"):
        raise InvalidRequestError(f"{field} cannot be combined with tools unless tool_choice is 'none'",
                                  param=field)
    return field, params


def template_kwargs(req: ChatCompletionRequest, tokenizer: Tokenizer) -> JSONObject:
    """``chat_template_kwargs`` checked: a key that is an ``apply_chat_template`` parameter
    (``tokenize``, ``tools``, ``chat_template`` ...) or ``messages`` is a 400 naming it."""
    kwargs = dict(req.chat_template_kwargs or {})
    reserved = set(inspect.signature(tokenizer.apply_chat_template).parameters) | {"messages"}
    for key in kwargs:
        if key in reserved or not key.isidentifier():
            raise InvalidRequestError(f"chat_template_kwargs may not set {key!r}",
                                      param=f"chat_template_kwargs.{key}")
    return kwargs


def token_bias(req: ChatCompletionRequest, vocab_size: int) -> dict[int, float] | None:
    if not req.logit_bias:
        return None
    bias = {}
    for key, value in req.logit_bias.items():
        token = int(key) if key.strip().isdigit() else -1
        if not 0 <= token < vocab_size:
            raise InvalidRequestError(f"logit_bias keys must be token ids in [0, {vocab_size}), got {key!r}",
                                      param="logit_bias")
        bias[token] = value
    return bias


def _top_logprobs(req: ChatCompletionRequest) -> int | None:
    if req.top_logprobs is not None and not req.logprobs:
        raise InvalidRequestError("top_logprobs requires logprobs to be true", param="top_logprobs")
    return (req.top_logprobs or 0) if req.logprobs else None


OPTIONAL_SAMPLING = ("top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens",
                     "stop_token_ids", "ignore_eos", "include_stop_str_in_output")
"""vLLM's sampling fields a chat or text completion request may set (``None``: unset)."""


def sampling_fields(req: Any, defaults: Mapping[str, float | int]) -> JSONObject:
    """``temperature``, ``top_p`` and the :data:`OPTIONAL_SAMPLING` fields ``req`` sets; an unset one
    takes the model's default (``defaults``), else OpenAI's (temperature 1, top_p 1) or is left out."""
    out: JSONObject = {
        "temperature": defaults.get("temperature", 1.0) if req.temperature is None else req.temperature,
        "top_p": defaults.get("top_p", 1.0) if req.top_p is None else req.top_p,
    }
    for opt in OPTIONAL_SAMPLING:
        if getattr(req, opt) is not None:
            out[opt] = getattr(req, opt)
        elif opt in defaults:
            out[opt] = defaults[opt]
    return out


def prepare(req: ChatCompletionRequest, tokenizer: Tokenizer, default_max_tokens: int,
            max_model_len: int | None, fmt: ToolCallFormat | None = None,
            encode: Callable[[str], list[int]] | None = None,
            defaults: Mapping[str, float | int] | None = None, cache_salt: str | None = None) -> PreparedChat:
    """Prompt ids and ``SamplingParams`` for a request.

    ``defaults``: the model's sampling defaults for fields the request leaves unset
    (``loom.runtime.checkpoint.generation_config``; its ``max_tokens`` replaces
    ``default_max_tokens``); otherwise OpenAI's (temperature 1, top_p 1).
    ``cache_salt``: the engine's salt for the request (:mod:`loom.api.cache_scope`).

    ``fmt`` is the model's tool-call format (detected from ``tokenizer`` when ``None``).
    ``encode`` tokenizes the rendered prompt instead of the tokenizer (the
    server passes :meth:`loom.orchestrator.reuse.GeneratedIds.encode` for the
    caller's key, so replies the client resends keep the ids the model generated).

    Raises:
        InvalidRequestError / ValueError: invalid combination or value (field named).
        ContextLengthError: the prompt alone fills the model window.
    """
    from loom.runtime.errors import ContextLengthError

    tools = tool_dicts(req)
    for i, t in enumerate(req.tools or []):
        if t.function.parameters is not None:
            check_schema(t.function.parameters, f"tools.{i}.function.parameters")
    forced, name = forced_tool(req)
    constraint_field, structured = output_constraint(req, forced)
    top_logprobs = _top_logprobs(req)
    fmt = fmt if fmt is not None else detect_format(tokenizer)
    kwargs = template_kwargs(req, tokenizer)
    messages = template_messages(req)
    check_text_chars(tokenizer, max_model_len, sum(len(_text(m.content)) for m in req.messages), "messages")
    ids = prompt_ids(tokenizer, fmt, messages, tools, template_kwargs=kwargs or None, encode=encode)
    if max_model_len is not None and len(ids) >= max_model_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens, but the "
            f"messages use {len(ids)} tokens.", param="messages")
    defaults = defaults or {}
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is None:
        max_tokens = int(defaults.get("max_tokens", default_max_tokens))
        if max_model_len is not None:
            max_tokens = max(1, min(max_tokens, max_model_len - len(ids)))
    elif max_model_len is not None and len(ids) + max_tokens > max_model_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(ids) + max_tokens} tokens ({len(ids)} in the messages, {max_tokens} in the "
            "completion).", param="max_tokens")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    sampling: JSONObject = {
        **sampling_fields(req, defaults),
        "max_tokens": max_tokens,
        "stop": [] if structured is not None else stop,
        "seed": req.seed,
        "skip_special_tokens": False,  # the parser needs <think> / <tool_call> markers
        "structured_output": structured,
        "logprobs": top_logprobs,
        "logit_bias": token_bias(req, len(tokenizer)),
        "cache_salt": cache_salt,
    }
    params = SamplingParams(**sampling)
    if forced:  # the user's schemas exactly as given (bound=False): an API must not narrow them
        # several calls only when asked explicitly (parallel_tool_calls=true with "required")
        params = force_call(params, fmt, tools or [], name, parallel=name is None and req.parallel_tool_calls is True)
    return PreparedChat(
        prompt_token_ids=ids,
        sampling_params=params,
        forced_tool_call=forced,
        constrained=structured is not None,
        parse_tools=bool(tools) and req.tool_choice != "none" and not forced,
        fmt=fmt,
        tool_names=frozenset(t.function.name for t in req.tools or []),
        n=req.n or 1,
        top_logprobs=top_logprobs,
        constraint_field="tools" if forced else constraint_field,
        return_token_ids=bool(req.return_token_ids),
        parallel_tool_calls=req.parallel_tool_calls is not False,
    )
