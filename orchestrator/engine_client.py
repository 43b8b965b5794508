"""One small model interface for the orchestrator (smolagents' ``Model`` idea).

``EngineClient`` wraps ``runtime.AsyncLLM`` (streams as it decodes) or
``runtime.LLM`` (one blocking ``generate`` in a worker thread; ``LLM`` is
thread-safe and batches concurrent callers together; the whole reply arrives
as one output).  Any number of clients may share one engine.  Everything else in the
orchestrator talks only to :meth:`EngineClient.stream` with prompt token ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import uuid
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from loom.json_types import JSONObject
from loom.orchestrator.protocols import AsyncEngine, Engine, SyncEngine

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing's own from Python 3.13
from loom.runtime.errors import request_error
from loom.runtime.outputs import RequestOutput
from loom.runtime.sampling_params import SamplingParams

DEFAULT_WINDOW = 4096


def _is_async_engine(llm: Engine) -> TypeIs[AsyncEngine]:
    gen = getattr(llm, "generate", None)
    return gen is not None and (inspect.isasyncgenfunction(gen) or inspect.iscoroutinefunction(gen))


class EngineClient:
    """Async streaming access to an in-process engine.

    Args:
        llm: ``runtime.AsyncLLM`` / ``runtime.LLM`` (or anything with their
            ``generate`` and ``tokenizer``).
        cache_salt: set on every request's ``SamplingParams`` (``cache_salt``), so the
            prefix cache shares this client's blocks only with requests of the same salt
            (a server salts by API key); ``None`` leaves each request's own.

    Raises:
        TypeError: ``llm`` has no ``generate`` or no ``tokenizer``.
    """

    def __init__(self, llm: Engine, cache_salt: str | None = None) -> None:
        if not hasattr(llm, "generate") or getattr(llm, "tokenizer", None) is None:
            raise TypeError("llm: expected a runtime.AsyncLLM or runtime.LLM (with .generate and .tokenizer)")
        self.llm = llm
        self.cache_salt = cache_salt
        self.tokenizer = llm.tokenizer
        self._async: AsyncEngine | None = None
        self._sync: SyncEngine | None = None
        if _is_async_engine(llm):
            self._async = llm
        else:
            self._sync = llm
        self.is_async = self._async is not None

    @property
    def max_model_len(self) -> int:
        """Context window in tokens (from the engine config, else the model config, else 4096)."""
        for path in ("config.max_model_len", "engine_config.max_model_len", "max_model_len",
                     "engine.config.max_model_len", "model_config.max_position_embeddings"):
            obj: Any = self.llm
            for part in path.split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, int) and obj > 0:
                return obj
        return DEFAULT_WINDOW

    @property
    def model_name(self) -> str | None:
        """The engine's model as traces name it (``gen_ai.request.model``): its registered name or folder's
        name; ``None`` when the engine does not say."""
        for path in ("engine.config.model", "config.model", "engine_config.model"):
            obj: Any = self.llm
            for part in path.split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, str) and obj:
                return obj.rstrip("/").rsplit("/", 1)[-1]
        return None

    async def stream(self, prompt_token_ids: list[int], sampling_params: SamplingParams,
                     request_id: str | None = None) -> AsyncGenerator[RequestOutput, None]:
        """Yield ``RequestOutput``s of one request; the last has ``finished=True``.

        Raises:
            whatever the engine raises at submission (``ContextLengthError``,
            ``KVCapacityError``, ``QueueFullError``, ``ValueError``);
            ``EngineStepError`` when its model step failed, ``InvalidRequestError``
            naming ``structured_output`` when its constraint dead-ended.
        """
        request_id = request_id or f"agent-{uuid.uuid4().hex[:12]}"
        if self.cache_salt is not None:
            sampling_params = dataclasses.replace(sampling_params, cache_salt=self.cache_salt)
        if self._async is not None:
            outs = self._async.generate(prompt_token_ids=prompt_token_ids, sampling_params=sampling_params,
                                        request_id=request_id)
            try:
                async for out in outs:
                    yield out
            finally:  # closed with this stream: a consumer that stops early aborts the request now, not at collection
                aclose = getattr(outs, "aclose", None)
                if aclose is not None:
                    await aclose()
            return
        sync = self._sync
        assert sync is not None

        def run() -> RequestOutput:
            return sync.generate(prompt_token_ids=[prompt_token_ids], sampling_params=sampling_params,
                                 use_tqdm=False)[0]

        out = await asyncio.to_thread(run)
        if out.finish_reason == "error":
            raise request_error(out)
        out.new_token_ids = list(out.token_ids)
        yield out

    async def retain_kv(self, key: str, ttl_s: float, waiting_on_tool: bool = False) -> None:
        """Re-time the engine's KV pins of ``key`` to ``ttl_s`` seconds from now, as a tool wait or an idle
        wait (``0`` releases them; ``runtime.AsyncLLM.retain_kv`` / ``runtime.LLM.retain_kv``); nothing
        when the engine has no pins."""
        fn = getattr(self.llm, "retain_kv", None)
        if fn is None:
            return
        if self._async is not None:
            fn(key, ttl_s, waiting_on_tool)  # posted to the engine thread, returns at once
        else:
            await asyncio.to_thread(fn, key, ttl_s, waiting_on_tool)  # the engine's lock may be held by a step

    def stats(self) -> JSONObject:
        """The engine's ``stats()`` (empty when it has none)."""
        fn = getattr(self.llm, "stats", None)
        return fn() if callable(fn) else {}
