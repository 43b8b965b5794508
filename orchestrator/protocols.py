"""The seams between Loom's packages, typed: what the orchestrator asks of an engine,
a retriever and a long-term memory.

Structural types (``typing.Protocol``), so anything with the methods fits:
``runtime.LLM`` / ``runtime.AsyncLLM`` are :data:`Engine`\\ s,
``retrieval.Retriever`` is a :class:`MultiQueryRetriever`,
``memory.LongTermMemory`` is a :class:`Memory`; test stand-ins and user
objects fit the same way.  The retriever and memory seams the built-in tools
use (``loom.tools.builtin``: ``SearchBackend``, ``MemoryBackend``) are the base of
these, so each method is declared once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

from loom.runtime.outputs import RequestOutput
from loom.runtime.sampling_params import SamplingParams
from loom.tools.builtin.memory import MemoryBackend, MemoryResult
from loom.tools.builtin.search import SearchBackend, SearchResult

__all__ = ["AsyncEngine", "Engine", "Memory", "MemoryHit", "ModelClient", "MultiQueryRetriever",
           "Retriever", "SearchHit", "SyncEngine", "Tokenizer", "decode_text", "eos_token_ids"]

# a Hugging Face fast tokenizer with a chat template (``transformers.PreTrainedTokenizerFast``):
# checked as transformers' base class; at run time any object with its methods will do
if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase as Tokenizer
else:
    Tokenizer = object


class AsyncEngine(Protocol):
    """``runtime.AsyncLLM``: streams each request's outputs as it decodes."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    def generate(self, prompt_token_ids: Sequence[int] | None = None,
                 sampling_params: SamplingParams | None = None,
                 request_id: str | None = None) -> AsyncIterator[RequestOutput]: ...


class SyncEngine(Protocol):
    """``runtime.LLM``: one blocking, batched ``generate`` returning final outputs."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    def generate(self, prompts: str | Sequence[str] | None = None,
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 prompt_token_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]: ...


#: what ``Agent`` and ``LoomChatModel`` accept as ``llm``
Engine = Union[AsyncEngine, SyncEngine]


class ModelClient(Protocol):
    """The one interface the agent loop talks to (``loom.orchestrator.engine_client.EngineClient``)."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def model_name(self) -> str | None: ...

    def stream(self, prompt_token_ids: list[int], sampling_params: SamplingParams,
               request_id: str | None = None) -> AsyncGenerator[RequestOutput, None]: ...

    async def retain_kv(self, key: str, ttl_s: float, waiting_on_tool: bool = False) -> None: ...


# One retrieval hit / one memory as the prompt shows them: the tools' read-only views
# (``loom.retrieval.types.Hit`` and ``loom.memory.types.MemoryHit`` satisfy them), one owner each.
SearchHit = SearchResult
MemoryHit = MemoryResult


class Retriever(SearchBackend, Protocol):
    """``search(query, k) -> hits``, best first (``retrieval.Retriever.search``)."""


@runtime_checkable
class MultiQueryRetriever(Retriever, Protocol):
    """A retriever that fuses several phrasings of one need (``retrieval.Retriever.search_many``)."""

    def search_many(self, queries: Iterable[str], k: int = 5,
                    identifier_queries: Iterable[str] | None = None) -> Sequence[SearchHit]: ...


class Memory(MemoryBackend, Protocol):
    """Long-term memory: ``search(query, namespace, k)`` and ``add(messages, namespace, source)``."""


def decode_text(tokenizer: Tokenizer, ids: Sequence[int], skip_special_tokens: bool = False,
                clean_up_tokenization_spaces: bool | None = None) -> str:
    """The text of one sequence of ``ids`` (``tokenizer.decode``, whose type also covers batches)."""
    text = tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens,
                            clean_up_tokenization_spaces=clean_up_tokenization_spaces)
    assert isinstance(text, str)  # one sequence in, one text out
    return text


def eos_token_ids(llm: Any) -> frozenset[int]:
    """The engine's end-of-sequence ids (``LLMEngine.eos_token_ids``: tokenizer, model
    config and generation config), the one place they are worked out.

    ``llm``: ``runtime.LLM`` / ``AsyncLLM`` (read through ``llm.engine``) or a
    stand-in with its own ``eos_token_ids``; empty when it has neither.
    """
    ids = getattr(getattr(llm, "engine", None), "eos_token_ids", None)
    if ids is None:
        ids = getattr(llm, "eos_token_ids", None)
    return frozenset(ids or ())
