"""``ScriptedLLM``: a scripted stand-in for the engine, for unit tests of orchestration logic only.

It replies with the next text of a script (encoded with the real tokenizer,
eos appended), streams one token per output with its text from the runtime's
own detokenizer (``loom.runtime.detokenizer``: stop strings cut and the request
finished as the engine does, eos left out of the text), and reports
``num_cached_tokens`` as a prefix cache with 16-token blocks would: the longest
common prefix with any earlier prompt + reply, floored to whole blocks, never
the whole prompt.  End-to-end tests use the real engine instead.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from loom.runtime.detokenizer import IncrementalDetokenizer
from loom.runtime.outputs import RequestOutput


class ScriptedLLM:
    """Async engine stand-in that replays scripted replies (test-only)."""

    def __init__(self, tokenizer: Any, replies: list[str], max_model_len: int = 4096, block_size: int = 16) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset({tokenizer.convert_tokens_to_ids(tokenizer.eos_token)})
        self.replies = list(replies)
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.prompts: list[list[int]] = []
        self.params: list[Any] = []
        self._seen: list[list[int]] = []

    def _cached(self, prompt: list[int]) -> int:
        best = 0
        for seq in self._seen:
            n = 0
            for a, b in zip(seq, prompt):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        best = min(best, len(prompt) - 1)
        return best - best % self.block_size

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any,
                       request_id: str | None = None) -> AsyncIterator[RequestOutput]:
        self.prompts.append(list(prompt_token_ids))
        self.params.append(sampling_params)
        text = self.replies.pop(0) if self.replies else "done"
        eos = self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
        ids = ids[: sampling_params.max_tokens]
        out = RequestOutput(request_id=request_id or "r", prompt_token_ids=list(prompt_token_ids),
                            num_cached_tokens=self._cached(prompt_token_ids), arrival_time=time.monotonic())
        detok = IncrementalDetokenizer(self.tokenizer.backend_tokenizer, prompt_token_ids, sampling_params)
        for i, tid in enumerate(ids):
            await asyncio.sleep(0)
            now = time.monotonic()
            if i == 0:
                out.first_token_time = now
            out.token_ids.append(tid)
            out.token_times.append(now)
            out.new_token_ids = [tid]
            stop = None if tid == eos else detok.add_token(tid)
            out.finished = stop is not None or i == len(ids) - 1
            out.new_text = detok.delta(out.finished)
            out.text = detok.text
            if out.finished:
                out.finish_time = now
                out.finish_reason = "stop" if tid == eos or stop is not None else "length"
                out.stop_reason = stop
            yield out
            if out.finished:
                break
        self._seen.append(list(prompt_token_ids) + out.token_ids)
