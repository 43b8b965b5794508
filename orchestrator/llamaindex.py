"""``LoomLlamaLLM``: a LlamaIndex ``CustomLLM`` over Loom's in-process engine (extra ``llamaindex``).

Set it as ``Settings.llm`` or pass it as ``llm=`` to any query or chat engine.
It is a chat model (``metadata.is_chat_model``): ``chat`` renders the
messages through the model's own chat template (:func:`loom.orchestrator.template.prompt_ids`,
the renderer ``/v1/chat/completions`` uses), and ``complete`` sends the
prompt as one user message through the same template (``formatted=True``
sends the prompt text as it is).  Streaming yields LlamaIndex's cumulative
``text``/``message.content`` plus the ``delta``; with ``runtime.AsyncLLM``
the deltas arrive as tokens are decoded, with ``runtime.LLM`` the reply
arrives whole.  Each response's ``additional_kwargs`` carry ``prompt_tokens``,
``completion_tokens``, ``cached_tokens`` (served by the prefix cache) and
``finish_reason``.  Sync calls run the engine's stream in a helper thread,
so they work inside a running event loop too; stopping a stream early
aborts its request.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Sequence

from llama_index.core.base.llms.types import (ChatMessage, ChatResponse, ChatResponseAsyncGen, ChatResponseGen,
                                              CompletionResponse, CompletionResponseAsyncGen, CompletionResponseGen,
                                              LLMMetadata, MessageRole)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from pydantic import Field, PrivateAttr

from loom.json_types import JSONObject
from loom.runtime.sampling_params import SamplingParams

from loom.orchestrator.engine_client import EngineClient
from loom.orchestrator.formats import ToolCallFormat, detect_format
from loom.orchestrator.template import prompt_ids
from loom.orchestrator.sync import iter_sync

# one streamed step: (cumulative text, delta, usage/finish fields or None until the end)
_Step = tuple[str, str, "JSONObject | None"]


class LoomLlamaLLM(CustomLLM):
    """LlamaIndex LLM over ``runtime.LLM`` / ``runtime.AsyncLLM``.

    Args:
        llm: the engine instance.
        model_name: the name ``metadata`` reports.
        max_tokens: reply budget in tokens (also ``metadata.num_output``).
        temperature / top_p / seed: sampling.

    Raises:
        loom.runtime.errors.ContextLengthError: (on a call) the rendered prompt does
            not fit the engine's ``max_model_len``; other engine submission errors.
        loom.runtime.errors.InvalidRequestError: the chat template rejects the messages.
    """

    llm: Any = Field(exclude=True, description="runtime.LLM or runtime.AsyncLLM")
    model_name: str = "loom"
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    _client: EngineClient | None = PrivateAttr(default=None)
    _format: ToolCallFormat | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "loom_llm"

    @property
    def client(self) -> EngineClient:
        if self._client is None:
            self._client = EngineClient(self.llm)
            self._format = detect_format(self._client.tokenizer)
        return self._client

    @property
    def metadata(self) -> LLMMetadata:
        """Context window (tokens, the engine's ``max_model_len``), output budget, chat model."""
        return LLMMetadata(context_window=self.client.max_model_len, num_output=self.max_tokens,
                           is_chat_model=True, model_name=self.model_name)

    # -- prompt and stream --------------------------------------------------------
    def _chat_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        msgs = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        client = self.client
        assert self._format is not None
        return prompt_ids(client.tokenizer, self._format, msgs, None)

    def _prompt_ids(self, prompt: str, formatted: bool) -> list[int]:
        if formatted:
            return list(self.client.tokenizer.encode(prompt, add_special_tokens=False))
        return self._chat_ids([ChatMessage(role=MessageRole.USER, content=prompt)])

    def _sampling(self, kwargs: JSONObject) -> SamplingParams:
        return SamplingParams(max_tokens=kwargs.get("max_tokens", self.max_tokens),
                              temperature=kwargs.get("temperature", self.temperature), top_p=self.top_p,
                              seed=self.seed, stop=list(kwargs.get("stop") or []))

    async def _steps(self, ids: list[int], kwargs: JSONObject) -> AsyncIterator[_Step]:
        text = ""
        async for out in self.client.stream(ids, self._sampling(kwargs)):
            delta, text = out.text[len(text):], out.text
            info = None
            if out.finished:
                info = {"prompt_tokens": len(ids), "completion_tokens": len(out.token_ids),
                        "cached_tokens": out.num_cached_tokens, "finish_reason": out.finish_reason}
            if delta or info:
                yield text, delta, info

    # -- completion ---------------------------------------------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """The reply to ``prompt`` (one user message unless ``formatted``)."""
        ids = self._prompt_ids(prompt, formatted)
        *_, (text, _, info) = iter_sync(lambda: self._steps(ids, kwargs))
        return CompletionResponse(text=text, additional_kwargs=info or {})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """Stream the reply to ``prompt``: cumulative ``text`` and each ``delta``."""
        ids = self._prompt_ids(prompt, formatted)
        for text, delta, info in iter_sync(lambda: self._steps(ids, kwargs)):
            yield CompletionResponse(text=text, delta=delta, additional_kwargs=info or {})

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        text, info = "", JSONObject()
        async for text, _, step_info in self._steps(self._prompt_ids(prompt, formatted), kwargs):
            info = step_info or info
        return CompletionResponse(text=text, additional_kwargs=info)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False,
                               **kwargs: Any) -> CompletionResponseAsyncGen:
        ids = self._prompt_ids(prompt, formatted)

        async def gen() -> CompletionResponseAsyncGen:
            async for text, delta, info in self._steps(ids, kwargs):
                yield CompletionResponse(text=text, delta=delta, additional_kwargs=info or {})

        return gen()

    # -- chat -----------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The assistant's reply to ``messages``, rendered through the model's chat template."""
        ids = self._chat_ids(messages)
        *_, (text, _, info) = iter_sync(lambda: self._steps(ids, kwargs))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), additional_kwargs=info or {})

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Stream the assistant's reply: cumulative ``message.content`` and each ``delta``."""
        ids = self._chat_ids(messages)
        for text, delta, info in iter_sync(lambda: self._steps(ids, kwargs)):
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta,
                               additional_kwargs=info or {})

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text, info = "", JSONObject()
        async for text, _, step_info in self._steps(self._chat_ids(messages), kwargs):
            info = step_info or info
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), additional_kwargs=info)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        ids = self._chat_ids(messages)

        async def gen() -> ChatResponseAsyncGen:
            async for text, delta, info in self._steps(ids, kwargs):
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta,
                                   additional_kwargs=info or {})

        return gen()


__all__ = ["LoomLlamaLLM"]
