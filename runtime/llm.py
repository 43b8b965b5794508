"""``LLM``: synchronous, batched generation for scripts (vLLM's ``LLM``).

``generate`` submits every prompt, steps the engine until all are finished
(with a tqdm progress bar for long batches) and returns the final outputs in
the order of the prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.config import EngineConfig
from runtime.engine import LLMEngine
from runtime.outputs import RequestOutput
from runtime.sampling_params import SamplingParams

_TQDM_MIN_REQUESTS = 8


class LLM:
    """Offline engine: ``LLM(model, **engine_args)``; engine args are ``EngineConfig`` fields.

    Raises:
        TypeError: an unknown engine argument. ValueError: an invalid one.
    """

    def __init__(self, model: str, **engine_args: Any) -> None:
        self.engine = LLMEngine(EngineConfig(model=model, **engine_args))
        self.tokenizer = self.engine.tokenizer
        self._next_id = 0

    @classmethod
    def from_config(cls, config: EngineConfig) -> LLM:
        llm = cls.__new__(cls)
        llm.engine = LLMEngine(config)
        llm.tokenizer = llm.engine.tokenizer
        llm._next_id = 0
        return llm

    def generate(
        self,
        prompts: str | Sequence[str] | None = None,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        prompt_token_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids); outputs in prompt order.

        Raises:
            ValueError: neither or both of ``prompts`` / ``prompt_token_ids``, or a
                ``sampling_params`` list of the wrong length; the submission errors
                of ``LLMEngine.add_request`` (checked for every prompt before any runs).
        """
        batch = self._token_batches(prompts, prompt_token_ids)
        # only finished outputs are returned, so the engine builds no others (vLLM does the same)
        params = [p.clone(output_kind="final_only") for p in self._params_list(sampling_params, len(batch))]
        requests = [self.engine.make_request(ids, p) for ids, p in zip(batch, params)]
        order: dict[str, int] = {}
        for req in requests:
            req.request_id = f"{self._next_id}"
            self._next_id += 1
            order[req.request_id] = len(order)
            self.engine.add_prepared(req)
        return self._run(order, use_tqdm and len(batch) >= _TQDM_MIN_REQUESTS)

    def _run(self, order: dict[str, int], use_tqdm: bool) -> list[RequestOutput]:
        results: list[RequestOutput | None] = [None] * len(order)
        bar = None
        if use_tqdm:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(order), desc="generate", unit="req", dynamic_ncols=True)
        remaining = len(order)
        while remaining:
            for out in self.engine.step():
                if out.finished and out.request_id in order:
                    results[order[out.request_id]] = out
                    remaining -= 1
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return results  # type: ignore[return-value]

    def _token_batches(self, prompts: Any, prompt_token_ids: Any) -> list[list[int]]:
        if (prompts is None) == (prompt_token_ids is None):
            raise ValueError("prompts: give exactly one of prompts or prompt_token_ids")
        if prompts is not None:
            texts = [prompts] if isinstance(prompts, str) else list(prompts)
            return [self.tokenizer.encode(t) for t in texts]
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

    def stats(self) -> dict[str, Any]:
        """The engine's counters (``LLMEngine.stats``)."""
        return self.engine.stats()
