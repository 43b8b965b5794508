"""Baseline target: the same requests through Hugging Face transformers ``generate``.

Greedy, one request at a time (``generate`` has no continuous batching or
paged KV cache): the run sends it the same arrivals as the engine, requests
queue on a lock, and the send time is taken before the wait, so TTFT
includes queueing as it would for a server built on ``generate``.  A ``transformers`` streamer stamps each new token as
``generate`` produces it, giving TTFT, ITL and E2EL on the same clock as the
other targets; nothing is served from a prefix cache.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from loom.evals.metrics import Chunk
from loom.evals.records import Outcome
from loom.evals.targets.base import EngineTarget, Request
from loom.orchestrator.protocols import decode_text


class _Stamper:
    """A ``transformers`` streamer recording (time, token ids) of each ``put`` after the prompt."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.ids: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        now = time.monotonic()
        for t in value.reshape(-1).tolist():
            self.ids.append(int(t))
            self.times.append(now)

    def end(self) -> None:
        pass


class HFTarget(EngineTarget):
    """``AutoModelForCausalLM.generate`` on ``model`` (float32, greedy, CPU or CUDA).

    Args:
        model: checkpoint folder.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``.
    """

    name = "hf"

    def __init__(self, model: str, device: str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        super().__init__(tokenizer)
        self.hf_tokenizer = tokenizer  # the base's, never None here
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        # transformers wraps PreTrainedModel.to with functools.wraps, whose type takes the bound call for unbound
        self.model = loaded.to(self.device).eval()  # type: ignore[arg-type]
        self._lock = threading.Lock()

    def _generate(self, req: Request) -> tuple[list[int], list[float], float]:
        import torch

        with self._lock:
            start = time.monotonic()
            stamp = _Stamper()
            ids = torch.tensor([req.prompt_ids], device=self.device)
            kwargs: dict[str, Any] = {"max_new_tokens": req.max_tokens, "do_sample": False,
                                      "attention_mask": torch.ones_like(ids), "streamer": stamp,
                                      "pad_token_id": self.hf_tokenizer.pad_token_id}
            if req.ignore_eos:
                kwargs["min_new_tokens"] = req.max_tokens
            with torch.inference_mode():
                self.model.generate(ids, **kwargs)
            return stamp.ids, stamp.times, start

    async def send(self, req: Request) -> Outcome:
        res = Outcome(send_time=time.monotonic(), prompt_tokens=len(req.prompt_ids))
        try:
            ids, times, start = await asyncio.to_thread(self._generate, req)
        except Exception as exc:  # noqa: BLE001 - recorded as a failed request
            res.error = f"{type(exc).__name__}: {exc}"
            return res
        res.output_ids = ids
        res.output_classes = ["output"] * len(ids)
        res.chunks = [Chunk(t, 1) for t in times]
        res.text = decode_text(self.hf_tokenizer, ids, skip_special_tokens=True)
        res.arrival_time, res.token_times = start, times
        res.first_token_time = times[0] if times else None
        res.finish_time = times[-1] if times else None
        res.finish_reason = "length" if len(ids) >= req.max_tokens else "stop"
        res.extra = {"output_ids": ids}
        return res
