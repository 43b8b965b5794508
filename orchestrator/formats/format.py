"""``ToolCallFormat``: how one model family writes tool calls and reasoning.

The format belongs to the model, not to Loom. One frozen object per family
says everything the rest of Loom needs, so the prompt renderer, the streaming
parser (``loom.orchestrator.parsers``) and the forced-call grammar
(``loom.orchestrator.formats.grammar``) always agree:

- which text opens and closes a call (``call_open`` / ``call_close``; a
  ``None`` close means the call runs to the end of the reply), whether the
  open marker only counts at the start of the reply (Llama 3.1 JSON), whether
  the markers are single special tokens (the grammar then references the
  token, since llguidance will not spell an added token from plain text);
- how the JSON body reads (one object, or a JSON array of calls as Mistral's
  ``[TOOL_CALLS]``; the arguments under ``"arguments"`` or ``"parameters"``);
- whether the model reasons in ``<think>`` blocks (only when its tokenizer or
  template knows ``<think>``);
- how messages reach the chat template (:meth:`ToolCallFormat.prepare`): for a
  template that renders tools itself, unchanged (``tools=`` is passed); for a
  template that cannot (``tools_in_system``, e.g. SmolLM2's), the tool
  schemas are appended to the system message in Loom's documented default
  (Hermes-style ``<tools>`` block), earlier calls become the text the model
  wrote and results are wrapped in ``<tool_response>`` tags.

Formats as vLLM's ``--tool-call-parser`` names them: ``hermes`` (Qwen2.5,
Qwen3, Hermes: ``<tool_call>`` blocks), ``llama3_json`` (Llama 3.1/3.2: a bare
JSON object as the whole reply), ``mistral`` (``[TOOL_CALLS]`` + JSON array),
plus ``default`` for templates without tool support.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from loom.json_types import JSONObject

# How a tool's result reaches the model in the default format (Qwen's Hermes template writes the same tags).
# A small model copies them into its answer: the parser drops the open tag and the agent stops a free step at
# the close tag (``loom.orchestrator.parsers``).
TOOL_RESULT_TAGS = ("<tool_response>", "</tool_response>")

DEFAULT_TOOLS_PREAMBLE = (
    "You can call functions to help with the user's request. The functions, as JSON schemas:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call a function, reply with only this, one block per call:\n"
    "<tool_call>\n{{\"name\": \"<function name>\", \"arguments\": {{<arguments as JSON>}}}}\n</tool_call>\n"
    "Each result comes back inside <tool_response></tool_response> tags."
)


@dataclass(frozen=True)
class ParsedCall:
    """One call read from a block: ``name`` and ``arguments`` or an ``error`` (why it is malformed)."""

    name: str | None
    arguments: JSONObject
    error: str | None = None


@dataclass(frozen=True)
class ToolCallFormat:
    """Tool-call and reasoning conventions of one model family (see the module docstring).

    Attributes:
        name: vLLM ``--tool-call-parser`` name (``hermes``, ``llama3_json``, ``mistral``, ``default``).
        call_open: text that opens a call block (kept in the block's text when ``open_in_body``).
        call_close: text that closes it, or ``None`` (the block ends with the reply).
        open_at_start_only: ``call_open`` counts only before any other content.
        open_in_body: ``call_open`` is the first character of the JSON body (``{``).
        array: the body is a JSON array of calls (one object is accepted too).
        arguments_key: key of the arguments object (``"arguments"`` or ``"parameters"``).
        separator: text between the open marker and the JSON, and between JSON and close marker.
        open_token_id: id of ``call_open`` when it is one added (special) token, else ``None``.
        close_token_id: the same for ``call_close``.
        tools_in_system: the template cannot render tools; Loom writes them into the system message.
        reasoning: the model writes ``<think>...</think>`` reasoning.
        tool_role: role of tool-result messages for the template (``tool`` or ``user``).
    """

    name: str
    call_open: str
    call_close: str | None
    open_at_start_only: bool = False
    open_in_body: bool = False
    array: bool = False
    arguments_key: str = "arguments"
    separator: str = "\n"
    open_token_id: int | None = None
    close_token_id: int | None = None
    tools_in_system: bool = False
    reasoning: bool = False
    tool_role: str = "tool"

    @property
    def open_token(self) -> bool:
        """``call_open`` is one special token (the grammar must reference it by id)."""
        return self.open_token_id is not None

    @property
    def close_token(self) -> bool:
        """``call_close`` is one special token."""
        return self.close_token_id is not None

    def with_tokenizer(self, **changes: Any) -> ToolCallFormat:
        """A copy with fields set from what a tokenizer knows (see ``detect``)."""
        return replace(self, **changes)

    # -- text of one call --------------------------------------------------------
    def render_call(self, name: str, arguments: JSONObject) -> str:
        """The text of one call as this format writes it (markers included)."""
        body = json.dumps({"name": name, self.arguments_key: arguments}, ensure_ascii=False)
        if self.array:
            body = f"[{body}]"
        if self.open_in_body:
            return body
        close = f"{self.separator}{self.call_close}" if self.call_close else ""
        return f"{self.call_open}{self.separator}{body}{close}"

    def parse_block(self, raw: str) -> list[ParsedCall]:
        """Calls in the text of one block (between the markers). Never raises: errors become ``error``."""
        text = raw.strip()
        if not text:
            return [ParsedCall(None, {}, "tool call block is empty")]
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            if self.open_in_body and ";" in text:  # Llama 3.x may chain calls with ';'
                parts = [p for p in text.split(";") if p.strip()]
                return [c for p in parts for c in self.parse_block(p)]
            return [ParsedCall(None, {}, f"tool call is not valid JSON: {exc.msg} at char {exc.pos}")]
        objs = obj if isinstance(obj, list) and self.array else [obj]
        if not objs:
            return [ParsedCall(None, {}, "tool call array is empty")]
        return [self._one(o) for o in objs]

    def _one(self, obj: Any) -> ParsedCall:
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return ParsedCall(None, {}, 'tool call must be a JSON object with a string "name"')
        args = obj.get(self.arguments_key, obj.get("arguments", obj.get("parameters", {})))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return ParsedCall(obj["name"], {}, f'"{self.arguments_key}" is a string that is not JSON')
        if not isinstance(args, dict):
            return ParsedCall(obj["name"], {}, f'"{self.arguments_key}" must be a JSON object')
        return ParsedCall(obj["name"], args)

    # -- messages for the chat template -------------------------------------------
    def prepare(self, messages: list[JSONObject], tools: list[JSONObject] | None
                ) -> tuple[list[JSONObject], list[JSONObject] | None]:
        """``(messages, tools)`` as this model's chat template takes them.

        For ``tools_in_system`` formats the tools go into the system message
        (one is added when there is none), assistant ``tool_calls`` become the
        call text appended to ``content``, and tool results are wrapped in
        ``<tool_response>`` and sent with ``tool_role``; ``tools`` comes back
        ``None``. Other formats return their input unchanged (a copy).
        """
        if not self.tools_in_system:
            return [dict(m) for m in messages], tools or None
        out: list[JSONObject] = []
        for m in messages:
            if m.get("role") == "assistant" and m.get("tool_calls"):
                calls = "\n".join(self.render_call(c["function"]["name"], _args(c["function"]["arguments"]))
                                  for c in m["tool_calls"])
                content = m.get("content") or ""
                out.append({"role": "assistant", "content": f"{content}\n{calls}" if content else calls})
            elif m.get("role") == "tool":
                out.append({"role": self.tool_role,
                            "content": f"{TOOL_RESULT_TAGS[0]}\n{m.get('content') or ''}\n{TOOL_RESULT_TAGS[1]}"})
            else:
                out.append({k: v for k, v in m.items() if k != "reasoning_content" or self.reasoning})
        if tools:
            block = self.tools_block(tools)
            if out and out[0].get("role") == "system":
                system = out[0].get("content") or ""
                out[0] = {**out[0], "content": f"{system}\n\n{block}" if system else block}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out, None

    def tools_block(self, tools: list[JSONObject]) -> str:
        """Loom's default description of ``tools`` for the system message (canonical JSON, in order)."""
        from loom.tools.base import canonicalize

        lines = "\n".join(json.dumps(canonicalize(t), ensure_ascii=False) for t in tools)
        return DEFAULT_TOOLS_PREAMBLE.format(tools=lines)


def _args(arguments: Any) -> JSONObject:
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return dict(arguments or {})


HERMES = ToolCallFormat("hermes", "<tool_call>", "</tool_call>")
DEFAULT = ToolCallFormat("default", "<tool_call>", "</tool_call>", tools_in_system=True)
LLAMA3_JSON = ToolCallFormat("llama3_json", "{", None, open_at_start_only=True, open_in_body=True,
                             arguments_key="parameters", separator="")
MISTRAL = ToolCallFormat("mistral", "[TOOL_CALLS]", None, array=True, separator=" ")

FORMATS: dict[str, ToolCallFormat] = {f.name: f for f in (HERMES, DEFAULT, LLAMA3_JSON, MISTRAL)}
