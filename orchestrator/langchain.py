"""``LoomChatModel``: a langchain-core ``BaseChatModel`` over Loom's in-process engine.

LangChain's own local-model wrapper drops tools (langchain-ai/langchain#29033); this
one keeps them both ways: ``bind_tools`` passes OpenAI-style schemas to the
chat template, replies are parsed by :mod:`loom.orchestrator.parsers` into
``AIMessage.tool_calls`` (malformed ones into ``invalid_tool_calls``), and
``AIMessage`` tool calls / ``ToolMessage`` results are rendered back through
the template.  ``tool_choice="required"`` or a tool name forces a valid call
with constrained decoding.

LangChain passes the whole conversation on every call, so the prompt is
assembled by :class:`~loom.orchestrator.context.ContextBuilder` from the message
list (everything before the last human message is history); with Loom's
prefix-stable template the ids equal the previous call's prompt + reply and
the engine's prefix cache serves them.  ``usage_metadata`` carries
``input_token_details.cache_read`` and ``output_token_details.reasoning`` from
the token-class ledger; token counting uses the real tokenizer and template.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Iterator, Sequence

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from loom.json_types import JSONObject
from loom.runtime.sampling_params import SamplingParams

from loom.orchestrator.budget import ContextBudget
from loom.orchestrator.context import Context, ContextBuilder
from loom.orchestrator.engine_client import EngineClient
from loom.orchestrator.events import ContentDelta, ReasoningDelta, ToolCallEvent
from loom.orchestrator.items import Item, ToolCallField, message_item, new_tool_call_id
from loom.orchestrator.ledger import PriceTable
from loom.orchestrator.formats import ToolCallFormat, detect_format
from loom.orchestrator.formats.grammar import FORCED_MIN_TOKENS, force_call
from loom.orchestrator.parsers import StreamingParser
from loom.orchestrator.step import StepOutcome, model_call
from loom.orchestrator.sync import iter_sync, run_sync


def _to_items(messages: Sequence[BaseMessage]) -> tuple[str | None, list[Item]]:
    """System prompt (``None`` without one) and template items; turn 2 starts at the last human message."""
    system = None
    msgs = list(messages)
    if msgs and msgs[0].type == "system":
        system = str(msgs.pop(0).content)
    last_human = max((i for i, m in enumerate(msgs) if m.type == "human"), default=0)
    items: list[Item] = []
    for i, m in enumerate(msgs):
        turn = 2 if i >= last_human else 1
        text = m.content if isinstance(m.content, str) else "".join(
            p if isinstance(p, str) else p.get("text", "") for p in m.content)
        if m.type == "ai":
            # arguments as a mapping: the chat templates render it as they render JSON text
            calls: list[ToolCallField] = [
                {"id": c.get("id") or new_tool_call_id(), "type": "function",
                 "function": {"name": c["name"], "arguments": c["args"]}}
                for c in (m.tool_calls if isinstance(m, AIMessage) else [])]
            items.append(message_item("assistant", turn, "assistant", text, [], tool_calls=calls or None,
                                      reasoning_content=m.additional_kwargs.get("reasoning_content")))
        elif m.type == "tool":
            items.append(message_item("tool_result", turn, "tool", text, [],
                                      tool_call_id=getattr(m, "tool_call_id", ""), name=getattr(m, "name", "") or ""))
        else:
            role = "system" if m.type == "system" else "user"
            items.append(message_item("user", turn, role, text, []))
    return system, items


class LoomChatModel(BaseChatModel):
    """Chat model over ``runtime.AsyncLLM`` / ``runtime.LLM``.

    Args:
        llm: the engine instance.
        temperature / top_p / max_tokens / seed: sampling (``max_tokens`` in tokens).
        prices: :class:`~loom.orchestrator.ledger.PriceTable` for the ledger's costs.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm: Any = Field(exclude=True)  # a loom.orchestrator.protocols.Engine (pydantic cannot check a Protocol)
    model_name: str = "loom"
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    prices: PriceTable = Field(default_factory=PriceTable)
    _client: EngineClient | None = PrivateAttr(default=None)
    _builders: dict[str, ContextBuilder] = PrivateAttr(default_factory=dict)
    _format: ToolCallFormat | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "loom"

    @property
    def _identifying_params(self) -> JSONObject:
        return {"model_name": self.model_name, "temperature": self.temperature, "max_tokens": self.max_tokens}

    @property
    def client(self) -> EngineClient:
        if self._client is None:
            self._client = EngineClient(self.llm)
        return self._client

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | dict | None = None, **kwargs: Any) -> Any:
        """Bind tools (Loom tools, LangChain tools, functions, pydantic models or OpenAI dicts).

        ``tool_choice``: ``"auto"``, ``"none"``, ``"required"``/``"any"`` or a tool name.
        """
        schemas = [_schema(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return super().bind(tools=schemas, **kwargs)

    # -- prompt ------------------------------------------------------------
    def _builder(self, system: str | None, tools: list[JSONObject] | None) -> ContextBuilder:
        tools = sorted(tools or [], key=lambda t: t["function"]["name"]) or None
        key = json.dumps([system, tools], sort_keys=True)
        if key not in self._builders:
            budget = ContextBudget(max_model_len=self.client.max_model_len, reserved_output=self.max_tokens)
            self._builders[key] = ContextBuilder(self.client.tokenizer, system, tools, budget, fmt=self.tool_format)
        return self._builders[key]

    def _context(self, messages: Sequence[BaseMessage], tools: list[JSONObject] | None) -> Context:
        system, items = _to_items(messages)
        builder = self._builder(system, tools)
        builder.render_items([], items)
        return builder.build(items, 2)

    @property
    def tool_format(self) -> ToolCallFormat:
        """The model's tool-call format (detected from its chat template once)."""
        if self._format is None:
            self._format = detect_format(self.client.tokenizer)
        return self._format

    def get_num_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the engine's tokenizer."""
        return len(self.client.tokenizer(text, add_special_tokens=False)["input_ids"])

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Sequence[Any] | None = None) -> int:
        """Prompt tokens of ``messages`` rendered through the chat template (generation prompt included)."""
        schemas = [_schema(t) for t in tools] if tools else None
        return len(self._context(messages, schemas).token_ids)

    def _sampling(self, stop: list[str] | None, tools: list[JSONObject] | None,
                  tool_choice: Any) -> SamplingParams:
        """The call's ``SamplingParams``; the engine stops on its own end-of-sequence ids."""
        sp = SamplingParams(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                            seed=self.seed, stop=list(stop or []), skip_special_tokens=False)
        if not tools or tool_choice in (None, "auto", "none"):
            return sp
        name = None if tool_choice in ("required", "any") else (
            tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else tool_choice)
        return force_call(sp, self.tool_format, tools, name, bound=True, min_tokens=FORCED_MIN_TOKENS)

    # -- streaming core ------------------------------------------------------
    async def _chunks(self, messages: list[BaseMessage], stop: list[str] | None,
                      **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        tools = kwargs.get("tools")
        tool_choice = kwargs.get("tool_choice")
        ctx = self._context(messages, tools)
        outcome = StepOutcome(parser=StreamingParser(
            parse_tools=bool(tools) and tool_choice != "none", fmt=self.tool_format,
            tool_names=frozenset(t["function"]["name"] for t in tools or [])))
        ids_sent: set[int] = set()
        async for ev in model_call(self.client, ctx, self._sampling(stop, tools, tool_choice), outcome, 1, 1,
                                   self.prices):
            if isinstance(ev, ContentDelta):
                yield ChatGenerationChunk(message=AIMessageChunk(content=ev.text))
            elif isinstance(ev, ReasoningDelta):
                yield ChatGenerationChunk(message=AIMessageChunk(content="",
                                                                 additional_kwargs={"reasoning_content": ev.text}))
            elif isinstance(ev, ToolCallEvent) and ev.arguments is None:
                first = ev.index not in ids_sent
                ids_sent.add(ev.index)
                yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[{
                    "name": ev.name, "args": ev.arguments_delta or None, "id": ev.id if first else None,
                    "index": ev.index, "type": "tool_call_chunk"}]))
        usage = outcome.ledger.to_langchain_usage()
        meta = {"finish_reason": "tool_calls" if outcome.calls else outcome.finish_reason,
                "model_name": self.model_name, "ledger": outcome.ledger.to_dict()}
        yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=usage, response_metadata=meta,
                                                         chunk_position="last"),
                                  generation_info={"finish_reason": meta["finish_reason"]})

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        merged: ChatGenerationChunk | None = None
        async for chunk in self._chunks(messages, stop, **kwargs):
            merged = chunk if merged is None else merged + chunk
        assert merged is not None
        return ChatResult(generations=[ChatGeneration(message=_final_message(merged.message),
                                                      generation_info=merged.generation_info)])

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        async for chunk in self._chunks(messages, stop, **kwargs):
            if run_manager and chunk.message.content:
                await run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return run_sync(lambda: self._agenerate(messages, stop, **kwargs))

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for chunk in iter_sync(lambda: self._chunks(messages, stop, **kwargs)):
            if run_manager and chunk.message.content:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk


def _schema(t: Any) -> JSONObject:
    """OpenAI tool dict of a Loom tool (``openai_schema()``) or anything LangChain converts."""
    return t.openai_schema() if callable(getattr(t, "openai_schema", None)) else convert_to_openai_tool(t)


def _final_message(chunk: BaseMessage) -> AIMessage:
    """The merged stream as an ``AIMessage`` (tool-call chunks parsed into tool calls)."""
    assert isinstance(chunk, AIMessageChunk)
    return AIMessage(content=chunk.content, additional_kwargs=chunk.additional_kwargs,
                     tool_calls=chunk.tool_calls, invalid_tool_calls=chunk.invalid_tool_calls,
                     usage_metadata=chunk.usage_metadata, response_metadata=chunk.response_metadata)


__all__ = ["LoomChatModel"]
