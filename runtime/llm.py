"""``LLM``: synchronous, batched generation for scripts (vLLM's ``LLM``).

``generate`` submits every prompt, steps the engine until all are finished
(with a tqdm progress bar for long batches) and returns the final outputs in
the order of the prompts; ``chat`` does the same for conversations, rendered by
the model's own chat template (vLLM's ``LLM.chat``).

Thread-safe: any number of threads may call ``generate`` on one ``LLM`` (two
agents, a LangChain model and a script sharing one engine).  The engine is
touched only under one lock; whichever caller holds it runs the next step for
*every* caller's requests, so concurrent callers batch together instead of
queueing whole ``generate`` calls, and finished outputs are handed to their
own caller.  A waiting caller looks for its results every few milliseconds.
A caller interrupted mid-call (``KeyboardInterrupt``) aborts its own requests
and leaves the engine clean for the others.  On CPU the thread that loaded the
engine, and each caller once its ``generate`` returns, lets go of its OpenMP
workers (:func:`loom.runtime.threads.release_openmp_threads`): an ``Agent``
calls ``generate`` on a worker thread, which decoded Qwen2.5-Coder-0.5B int8 at
26 tokens/s beside the loading thread's workers and at 32-34 without them (the
main thread: 35-36).  Concurrent callers step from several threads, each with
its own team; ``AsyncLLM`` steps from one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from loom.json_types import JSONObject
from loom.runtime.config import EngineConfig
from loom.runtime.engine import LLMEngine
from loom.runtime.inputs import PromptType, prompt_ids
from loom.runtime.outputs import RequestOutput
from loom.runtime.sampling_params import SamplingParams
from loom.runtime.threads import release_openmp_threads

_TQDM_MIN_REQUESTS = 8
_POLL_S = 0.005  # how often a caller waiting for the engine lock checks its results (s)


class LLM:
    """Offline engine: ``LLM(model, **engine_args)``; engine args are ``EngineConfig`` fields.

    Raises:
        TypeError: an unknown engine argument. ValueError: an invalid one.
    """

    def __init__(self, model: str, **engine_args: Any) -> None:
        self._start(LLMEngine(EngineConfig(model=model, **engine_args)))

    @classmethod
    def from_config(cls, config: EngineConfig) -> LLM:
        llm = cls.__new__(cls)
        llm._start(LLMEngine(config))
        return llm

    def _start(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self._cpu = engine.device.type == "cpu"
        if self._cpu:  # generate may run on another thread (an Agent's worker thread): loom.runtime.threads
            release_openmp_threads()
        self._next_id = 0
        self._lock = threading.Lock()  # guards the engine, _next_id and _owners
        # engine request id -> the result slots of the caller that submitted it
        self._owners: dict[str, _Call] = {}

    def get_tokenizer(self) -> Any:
        """The engine's Hugging Face tokenizer (vLLM's ``LLM.get_tokenizer``): the one ``generate`` encodes
        text prompts with and ``chat`` renders the chat template with."""
        return self.tokenizer

    def shutdown(self) -> None:
        """Stop the engine's tensor-parallel worker processes, if any (``LLMEngine.shutdown``)."""
        self.engine.shutdown()

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType] | None = None,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        prompt_token_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Generate for every prompt; outputs in prompt order.

        A prompt is a string or, as in vLLM, a ``TextPrompt`` ``{"prompt": str}`` or a ``TokensPrompt``
        ``{"prompt_token_ids": [int, ...]}`` (token ids used as given: no special tokens added); a list may
        mix them.  ``prompt_token_ids=`` (vLLM's older keyword) takes ids alone.

        Raises:
            ValueError: neither or both of ``prompts`` / ``prompt_token_ids``; a malformed prompt
                (``InvalidRequestError``, :func:`loom.runtime.inputs.prompt_ids`); a ``sampling_params`` list of the
                wrong length; the submission errors of ``LLMEngine.add_request`` (checked for every prompt before
                any runs).
        """
        batch = self._token_batches(prompts, prompt_token_ids)
        # only finished outputs are returned, so the engine builds no others (vLLM does the same)
        params = [p.clone(output_kind="final_only") for p in self._params_list(sampling_params, len(batch))]
        requests = [self.engine.make_request(ids, p) for ids, p in zip(batch, params)]
        call = _Call(len(requests))
        with self._lock:
            for i, req in enumerate(requests):
                req.request_id = f"{self._next_id}"
                self._next_id += 1
                call.order[req.request_id] = i
            try:
                for req in requests:
                    self.engine.add_prepared(req)
                    self._owners[req.request_id] = call
            except BaseException:
                self._abort(call)
                raise
        bar = None
        if use_tqdm and len(batch) >= _TQDM_MIN_REQUESTS:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(batch), desc="generate", unit="req", dynamic_ncols=True)
        try:
            self._run(call, bar)
        finally:
            if bar is not None:
                bar.close()
            if self._cpu:  # this thread's OpenMP workers would slow the next caller's thread
                release_openmp_threads()
        return call.results  # type: ignore[return-value]

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
        chat_template_kwargs: JSONObject | None = None,
    ) -> list[RequestOutput]:
        """Reply to one conversation, or to each of several (vLLM's ``LLM.chat``); outputs in order.

        Each conversation (OpenAI-style ``{"role": ..., "content": ...}`` messages) is rendered by the model's
        own chat template (``chat_template_kwargs``: extra template variables, e.g.
        ``{"enable_thinking": False}``), tokenized without adding special tokens a second time, and generated
        as :meth:`generate` does.  Tools and tool calls are the agent's (``loom.orchestrator.Agent``, REST
        ``/v1/chat/completions``), which renders them in each model's tool-call format.

        Raises:
            ValueError: no conversation, an empty one, a message that is not a mapping, or a tokenizer with no
                chat template; the errors of :meth:`generate`.
        """
        convs: list[Any] = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        if not convs or any(isinstance(c, (str, Mapping)) or not c or not all(isinstance(m, Mapping) for m in c)
                            for c in convs):
            raise ValueError("messages: give a list of {'role': ..., 'content': ...} messages, or a list of them")
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("chat: this model's tokenizer has no chat template; call generate() with a prompt")
        ids = []
        for conv in convs:
            rendered: Any = [dict(m) for m in conv]  # the template reads any JSON content, not only str
            text = self.tokenizer.apply_chat_template(rendered, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt,
                                                      **(chat_template_kwargs or {}))
            ids.append(self.tokenizer.encode(str(text), add_special_tokens=False))
        return self.generate(prompt_token_ids=ids, sampling_params=sampling_params, use_tqdm=use_tqdm)

    def _run(self, call: _Call, bar: Any) -> None:
        shown = 0
        try:
            while not call.done.is_set():
                if not self._lock.acquire(timeout=_POLL_S):
                    continue
                try:
                    if not call.done.is_set():
                        for out in self.engine.step():
                            owner = self._owners.pop(out.request_id, None) if out.finished else None
                            if owner is not None:
                                owner.deliver(out)
                finally:
                    self._lock.release()
                if bar is not None and call.num_done > shown:
                    bar.update(call.num_done - shown)
                    shown = call.num_done
        except BaseException:
            with self._lock:
                self._abort(call)
            raise

    def _abort(self, call: _Call) -> None:
        """Abort ``call``'s unfinished requests (lock held)."""
        for request_id, i in call.order.items():
            if call.results[i] is None and self._owners.pop(request_id, None) is not None:
                self.engine.abort_request(request_id)

    def _token_batches(self, prompts: Any, prompt_token_ids: Any) -> list[list[int]]:
        if (prompts is None) == (prompt_token_ids is None):
            raise ValueError("prompts: give exactly one of prompts or prompt_token_ids")
        if prompts is not None:
            batch = [prompts] if isinstance(prompts, str | Mapping) else list(prompts)
            return [prompt_ids(p, self.tokenizer, f"prompts[{i}]") for i, p in enumerate(batch)]
        ids = list(prompt_token_ids)
        if ids and isinstance(ids[0], int):
            return [ids]
        return [list(p) for p in ids]

    @staticmethod
    def _params_list(params: Any, n: int) -> list[SamplingParams]:
        if params is None:
            return [SamplingParams()] * n
        if isinstance(params, SamplingParams):
            return [params] * n
        params = list(params)
        if len(params) != n:
            raise ValueError(f"sampling_params: {len(params)} given for {n} prompts")
        return params

    def retain_kv(self, key: str, ttl_s: float, waiting_on_tool: bool = False) -> int:
        """Re-time the KV pins of ``key`` to ``ttl_s`` seconds from now, as a tool wait or an idle wait
        (``0`` releases them; ``LLMEngine.retain_kv``); returns the blocks it holds pinned."""
        with self._lock:
            return self.engine.retain_kv(key, ttl_s, waiting_on_tool)

    def stats(self) -> JSONObject:
        """The engine's counters (``LLMEngine.stats``)."""
        return self.engine.stats()


class _Call:
    """Result slots of one ``generate`` call, filled by whichever caller steps."""

    def __init__(self, num_requests: int) -> None:
        self.order: dict[str, int] = {}
        self.results: list[RequestOutput | None] = [None] * num_requests
        self.num_done = 0
        self.done = threading.Event()
        if num_requests == 0:
            self.done.set()

    def deliver(self, out: RequestOutput) -> None:
        self.results[self.order[out.request_id]] = out
        self.num_done += 1
        if self.num_done == len(self.results):
            self.done.set()
