"""``AsyncLLM``: the engine stepping on a background thread, streamed to asyncio.

One daemon thread owns the ``LLMEngine``: it drains an inbox of submissions
and aborts, runs ``step()``, and hands each ``RequestOutput`` to the request's
``asyncio.Queue`` through ``loop.call_soon_threadsafe`` (the only thread-safe
way into an event loop).  The event loop therefore never waits for a model
step, so an asyncio server stays responsive.  Validation
(``LLMEngine.make_request``) runs in the caller, so bad input raises at once
in ``generate`` and never reaches the engine thread.  On CPU the engine thread's OpenMP team must be
the process's only one, so the thread that built the engine lets its workers go
(:func:`loom.runtime.threads.release_openmp_threads`).  A consumer that stops
iterating (break, cancel, disconnect) aborts its request and frees its blocks.

Inside the engine every submission gets its own id (``"<request_id>#<n>"``):
a caller may reuse a ``request_id`` as soon as its previous stream has ended,
even while that stream's abort is still on its way to the engine, and the old
request's final output can never reach the new stream.  Outputs carry the
caller's ``request_id``.  A request the engine could not serve
(``finish_reason="error"``) raises in its own stream only: ``EngineStepError``
when its model step failed, ``InvalidRequestError`` naming
``structured_output`` when its own constraint dead-ended mid-generation.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from loom.json_types import JSONObject
from loom.runtime.config import EngineConfig
from loom.runtime.engine import LLMEngine
from loom.runtime.errors import EngineStepError, InvalidRequestError, LoomError, QueueFullError, request_error
from loom.runtime.inputs import PromptType, prompt_ids
from loom.runtime.outputs import RequestOutput
from loom.runtime.request import Request
from loom.runtime.sampling_params import SamplingParams
from loom.runtime.threads import release_openmp_threads

logger = logging.getLogger(__name__)


class AsyncLLM:
    """Async engine: ``AsyncLLM(model, **engine_args)`` or ``AsyncLLM.from_config(cfg)``."""

    def __init__(self, model: str, **engine_args: Any) -> None:
        self._start(LLMEngine(EngineConfig(model=model, **engine_args)))

    @classmethod
    def from_config(cls, config: EngineConfig) -> AsyncLLM:
        self = cls.__new__(cls)
        self._start(LLMEngine(config))
        return self

    def _start(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.config = engine.config
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._inbox: list[tuple[str, Any]] = []
        # engine id -> (loop, queue, caller's request_id); caller's id -> engine id
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue, str]] = {}
        self._active: dict[str, str] = {}
        self._seq = itertools.count()
        self._stats = engine.stats()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="loom-engine", daemon=True)
        self._thread.start()
        if engine.device.type == "cpu":
            # the load's OpenMP workers would leave the engine thread's team sleeping between regions
            release_openmp_threads()  # (loom.runtime.threads: 15 -> 31 tokens/s on 2 cores)

    async def generate(
        self,
        prompt_token_ids: Sequence[int] | PromptType | None = None,
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        prompt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Stream one request's outputs (cumulative fields plus ``new_*`` deltas).

        The first argument is token ids or, as vLLM's ``AsyncLLM.generate(prompt, sampling_params,
        request_id)`` takes it, a string, ``TextPrompt`` or ``TokensPrompt`` (:mod:`loom.runtime.inputs`).

        Raises (on the first iteration, before anything is queued):
            ContextLengthError, KVCapacityError, QueueFullError, ValueError.
        Raises (later): EngineStepError when its model step failed;
            InvalidRequestError (``param="structured_output"``) when its
            constraint dead-ended mid-generation (the other streams go on).
        """
        given = prompt if prompt_token_ids is None else prompt_token_ids
        if given is None:
            raise InvalidRequestError("prompt_token_ids: give prompt_token_ids or prompt", param="prompt_token_ids")
        ids = prompt_ids(given, self.tokenizer) if isinstance(given, str | Mapping) else given
        caller_id = request_id or uuid.uuid4().hex
        req = self.engine.make_request(ids, sampling_params, caller_id)
        queue: asyncio.Queue = asyncio.Queue()
        self._submit(req, caller_id, asyncio.get_running_loop(), queue)
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finished
                if item.finish_reason == "error":
                    raise request_error(item)
                yield item
                if finished:
                    return
        finally:
            with self._lock:
                if self._active.get(caller_id) == req.request_id:
                    del self._active[caller_id]
            if not finished:
                self._post(("abort", req.request_id))

    def _submit(self, req: Request, caller_id: str, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
        with self._lock:
            if self._stopped:
                raise LoomError("AsyncLLM is shut down")
            if caller_id in self._active:
                raise InvalidRequestError(f"request_id: {caller_id!r} is already running", param="request_id")
            if self._stats["num_waiting"] + len(self._inbox) >= self.config.max_waiting:
                raise QueueFullError("too many requests waiting (max_waiting)")
            req.request_id = f"{caller_id}#{next(self._seq)}"
            self._active[caller_id] = req.request_id
            self._inbox.append(("add", (req, loop, queue, caller_id)))
        self._wake.set()

    def _post(self, item: tuple[str, Any]) -> None:
        with self._lock:
            self._inbox.append(item)
        self._wake.set()

    async def abort(self, request_id: str) -> None:
        """Abort the running request ``request_id``; its stream ends with ``finish_reason="abort"``.

        Does nothing when no request with that id is running.
        """
        with self._lock:
            engine_id = self._active.get(request_id)
        if engine_id is not None:
            self._post(("abort", engine_id))

    def retain_kv(self, key: str, ttl_s: float, waiting_on_tool: bool = False) -> None:
        """Re-time the KV pins of ``key`` to ``ttl_s`` seconds from now, as a tool wait or an idle wait
        (``0`` releases them), on the engine thread before its next step (``LLMEngine.retain_kv``);
        returns at once."""
        self._post(("retain", (key, ttl_s, waiting_on_tool)))

    async def get_tokenizer(self) -> Any:
        """The engine's Hugging Face tokenizer, awaited as vLLM's ``AsyncLLM.get_tokenizer`` is: the one
        ``generate`` encodes text prompts with."""
        return self.tokenizer

    def stats(self) -> JSONObject:
        """Engine counters as of the last step (``LLMEngine.stats``)."""
        with self._lock:
            return dict(self._stats)

    def shutdown(self) -> None:
        """Stop the engine thread; in-flight requests end with ``finish_reason="abort"``."""
        with self._lock:
            self._stopped = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self.engine.shutdown()

    # -- engine thread ---------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.clear()
            with self._lock:
                inbox, self._inbox = self._inbox, []
                stopped = self._stopped
            self._handle_inbox(inbox)
            if stopped:
                for request_id in list(self.engine.requests):
                    self.engine.abort_request(request_id)
                self._deliver(self.engine.step())
                return
            if not self.engine.has_unfinished_requests():
                self._wake.wait()
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # noqa: BLE001 - a failed step must reach every waiter
                logger.exception("engine step failed")
                self._fail_all(exc)
                continue
            self._deliver(outputs)

    def _handle_inbox(self, inbox: list[tuple[str, Any]]) -> None:
        for kind, payload in inbox:
            if kind == "add":
                req, loop, queue, caller_id = payload
                try:
                    self.engine.add_prepared(req)
                except LoomError as exc:
                    _put(loop, queue, exc)
                    continue
                self._streams[req.request_id] = (loop, queue, caller_id)
            elif kind == "retain":
                self.engine.retain_kv(*payload)
                stats = self.engine.stats()  # pins show in stats() at once, not after the next step
                with self._lock:
                    self._stats = stats
            else:
                self.engine.abort_request(payload)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            target = self._streams.pop(out.request_id, None) if out.finished else self._streams.get(out.request_id)
            if target is not None:
                out.request_id = target[2]
                _put(target[0], target[1], out)
        stats = self.engine.stats()
        with self._lock:
            self._stats = stats

    def _fail_all(self, exc: Exception) -> None:
        for request_id in list(self.engine.requests):
            self.engine.abort_request(request_id)
        self.engine.step()
        for loop, queue, _ in self._streams.values():
            _put(loop, queue, EngineStepError(f"the engine step failed ({type(exc).__name__})"))
        self._streams.clear()


def _put(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item: Any) -> None:
    try:
        loop.call_soon_threadsafe(queue.put_nowait, item)
    except RuntimeError:  # the consumer's loop is closed
        pass
