"""Pick a model's :class:`ToolCallFormat` from its chat template and tokenizer.

Rules, in order (vLLM users name the same formats with ``--tool-call-parser``):

1. ``[TOOL_CALLS]`` in the template or the vocabulary: ``mistral``;
2. ``<tool_call>`` in the template: ``hermes`` (Qwen2.5/Qwen3/Hermes);
3. ``<|python_tag|>`` or a ``"parameters"`` call spelled in the template: ``llama3_json``;
4. otherwise ``default``.

``override`` replaces steps 1-4 with a named format. Then, whatever the
format, facts are read off the tokenizer: markers that are single added
tokens (``open_token`` / ``close_token``), ``<think>`` reasoning (only when the
template or the vocabulary knows ``<think>``), and whether the template can
render tools at all: if rendering a probe conversation with a tool changes
nothing, tools go into the system message (``tools_in_system``) and tool
results use the ``tool`` role only when the template renders that role's
content, else ``user``.
"""

from __future__ import annotations

import logging
from typing import Any

from loom.json_types import JSONObject
from loom.orchestrator.formats.format import DEFAULT, FORMATS, HERMES, LLAMA3_JSON, MISTRAL, ToolCallFormat
from loom.orchestrator.protocols import Tokenizer

logger = logging.getLogger(__name__)

_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool_x", "description": "probe", "parameters": {"type": "object", "properties": {}}}}
_PROBE_RESULT = "probe-result-7f3a"


def template_source(tokenizer: Tokenizer) -> str:
    """The chat template text (all named templates joined when it is a dict)."""
    tmpl = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(tmpl, dict):
        return "\n".join(str(v) for v in tmpl.values())
    return str(tmpl)


def _render(tokenizer: Tokenizer, messages: list[JSONObject], tools: Any = None) -> str | None:
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    except Exception:  # noqa: BLE001 - templates raise what they like on roles they refuse
        return None
    return text if isinstance(text, str) else None


def renders_tools(tokenizer: Tokenizer) -> bool:
    """Whether the template shows a tool passed with ``tools=`` (a probe name appears)."""
    text = _render(tokenizer, [{"role": "user", "content": "hi"}], tools=[_PROBE_TOOL])
    return text is not None and "probe_tool_x" in text


def tool_role(tokenizer: Tokenizer) -> str:
    """``tool`` when the template renders a tool message's content, else ``user``."""
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}, {"role": "tool", "content": _PROBE_RESULT}]
    text = _render(tokenizer, msgs)
    return "tool" if text is not None and _PROBE_RESULT in text else "user"


def _base(template: str, vocab: dict[str, int]) -> ToolCallFormat:
    if "[TOOL_CALLS]" in template or "[TOOL_CALLS]" in vocab:
        return MISTRAL
    if "<tool_call>" in template:
        return HERMES
    if "<|python_tag|>" in template or '"parameters"' in template:
        return LLAMA3_JSON
    return DEFAULT


def detect_format(tokenizer: Tokenizer, override: str | None = None) -> ToolCallFormat:
    """The tool-call / reasoning format of the model behind ``tokenizer``.

    Args:
        tokenizer: a HF tokenizer with a chat template.
        override: a format name (``hermes``, ``llama3_json``, ``mistral``,
            ``default``) to use instead of detection; ``None`` or ``"auto"`` detects.

    Raises:
        ValueError: ``override`` names no known format.
    """
    template = template_source(tokenizer)
    added = dict(tokenizer.get_added_vocab()) if hasattr(tokenizer, "get_added_vocab") else {}
    if override not in (None, "", "auto"):
        if override not in FORMATS:
            raise ValueError(f"tool_call_parser: unknown format {override!r}; one of {sorted(FORMATS)} or 'auto'")
        fmt = FORMATS[override]
    else:
        fmt = _base(template, added)
    in_system = fmt.tools_in_system or not renders_tools(tokenizer)
    fmt = fmt.with_tokenizer(
        open_token_id=added.get(fmt.call_open),
        close_token_id=added.get(fmt.call_close) if fmt.call_close is not None else None,
        reasoning="<think>" in added or "<think>" in template,
        tools_in_system=in_system,
        tool_role=tool_role(tokenizer) if in_system else "tool",
    )
    logger.debug("tool-call format %s (tools_in_system=%s, reasoning=%s)", fmt.name, in_system, fmt.reasoning)
    return fmt
