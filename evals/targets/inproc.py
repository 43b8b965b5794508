"""In-process target: requests stream straight from a ``runtime.AsyncLLM``.

The send time is taken just before submission; a chunk is one
``RequestOutput`` delta (the tokens one engine step produced: several under
speculative decoding) stamped with the engine's time for its last token.
Stamping on receipt instead would add the harness's own event-loop lag (the
engine thread holds the GIL while it steps, so deliveries to a busy consumer
bunch up and fake near-zero ITLs); that lag is recorded per request as
``client_lag_ms`` (mean receipt minus engine time).  The engine's timestamps
(arrival, first token, per-token) also feed the ledger.
Every output token gets a class (``reasoning``, ``tool_call``, ``output``)
from the engine's text delta (``loom.orchestrator.classify.OutputClassifier``, the
agent's own classifier).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from loom.evals.metrics import Chunk
from loom.evals.records import Outcome
from loom.evals.targets.base import EngineTarget, Request
from loom.json_types import JSONObject

logger = logging.getLogger(__name__)


class InprocTarget(EngineTarget):
    """Sends token-id prompts to an in-process ``AsyncLLM``.

    Args:
        llm: a started ``runtime.AsyncLLM`` (the target shuts it down on ``close``).
    """

    name = "inproc"

    def __init__(self, llm: Any) -> None:
        super().__init__(llm.tokenizer)
        self.llm = llm

    @classmethod
    def from_settings(cls, model: str, settings: JSONObject) -> InprocTarget:
        """Start an ``AsyncLLM`` for ``model`` with engine settings (``EngineConfig`` fields)."""
        from loom.runtime import AsyncLLM, EngineConfig

        return cls(AsyncLLM.from_config(EngineConfig(model=model, **settings)))

    async def send(self, req: Request) -> Outcome:
        from loom.orchestrator.classify import OutputClassifier
        from loom.runtime import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=req.max_tokens, ignore_eos=req.ignore_eos,
                                seed=req.seed)
        classify = OutputClassifier()
        res = Outcome(send_time=time.monotonic(), prompt_tokens=len(req.prompt_ids))
        last = None
        lags: list[float] = []
        try:
            async for out in self.llm.generate(prompt_token_ids=req.prompt_ids, sampling_params=params,
                                               request_id=req.request_id):
                now = time.monotonic()
                last = out
                if out.new_token_ids:
                    stamp = out.token_times[-1] if out.token_times else now
                    lags.append(now - stamp)
                    start = len(classify.classes)
                    classify.feed(out.new_text, len(out.new_token_ids))
                    visible = any(c != "reasoning" for c in classify.classes[start:])
                    res.chunks.append(Chunk(stamp, len(out.new_token_ids), visible))
        except Exception as exc:  # noqa: BLE001 - one failed request is recorded, the run goes on
            logger.warning("request %s failed: %s", req.request_id, exc)
            res.error = f"{type(exc).__name__}: {exc}"
        classify.finish()
        res.output_classes = classify.classes
        if last is not None:
            self._fill(res, last)
            res.extra["client_lag_ms"] = 1000.0 * sum(lags) / len(lags) if lags else None
        return res

    @staticmethod
    def _fill(res: Outcome, out: Any) -> None:
        res.output_ids = list(out.token_ids)
        res.output_classes = (res.output_classes + ["output"] * len(res.output_ids))[: len(res.output_ids)]
        res.text = out.text
        res.finish_reason = out.finish_reason
        res.cached_tokens = out.num_cached_tokens
        res.recompute_tokens = out.num_recompute_tokens
        res.recompute_cached_tokens = out.num_recompute_cached_tokens
        res.arrival_time, res.first_token_time = out.arrival_time, out.first_token_time
        res.token_times, res.finish_time = list(out.token_times), out.finish_time
        res.num_drafts, res.num_draft_tokens = out.num_drafts, out.num_draft_tokens
        res.num_accepted_tokens = out.num_accepted_tokens
        res.extra = {"output_ids": res.output_ids,
                     "engine_ttft_ms": _ms(out.arrival_time, out.first_token_time),
                     "engine_decode_ms": _ms(out.token_times[0], out.token_times[-1]) if out.token_times else 0.0}
        if out.finish_reason == "abort" and res.error is None:
            res.error = "aborted"

    def stats(self) -> JSONObject | None:
        return self.llm.stats()

    async def close(self) -> None:
        self.llm.shutdown()


def _ms(start: float | None, end: float | None) -> float | None:
    return (end - start) * 1000.0 if start is not None and end is not None else None
