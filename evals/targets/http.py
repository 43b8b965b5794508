"""HTTP target: any OpenAI-compatible server (``loom serve``, vLLM, ...), streamed.

Each request is a streamed ``POST /v1/chat/completions`` with
``stream_options.include_usage`` (httpx); chunk times are taken as each
``data:`` event arrives, token counts and cached tokens come from the final
usage chunk (``prompt_tokens_details.cached_tokens``,
``completion_tokens_details.reasoning_tokens``).  Against a Loom server the
engine gauges of ``/metrics`` (KV blocks, running, waiting, preemptions) stand
in for ``engine.stats()``.  Requests ask for vLLM's ``return_token_ids``: a
server that returns the reply's ids (Loom, vLLM >= 0.10.2) gives the exact
ids the next turn's prompt is built from, as the server itself reuses them for
the resent reply (Loom's stateless prefix cache), so prompt counts and class
spans agree with the server's; other servers' replies are re-encoded.  Greedy decoding
(``temperature=0``) and the run's ``seed`` keep runs repeatable; the API has
no ``ignore_eos``, so a reply can stop before ``max_tokens``.
"""

from __future__ import annotations

import json
import logging
import time

from loom.evals.metrics import Chunk
from loom.evals.records import Outcome
from loom.evals.targets.base import EngineTarget, Request
from loom.json_types import JSONObject
from loom.orchestrator.protocols import Tokenizer
from loom.runtime.errors import LoomError

logger = logging.getLogger(__name__)


class TargetUnreachableError(LoomError):
    """The HTTP target did not answer (connection refused, DNS, timeout)."""


class HttpTarget(EngineTarget):
    """Streams chat completions from ``base_url`` (``http://HOST:PORT``).

    Args:
        base_url: server root (``/v1`` is appended).
        tokenizer: local tokenizer of the served model (class spans are computed locally).
        api_key: bearer key, if the server wants one (``LOOM_API_KEY`` / ``OPENAI_API_KEY``).
        model: model name to request; default the first of ``GET /v1/models``.
        timeout_s: per-request timeout (seconds).
    """

    name = "http"
    exact_ids = False

    def __init__(self, base_url: str, tokenizer: Tokenizer | None, api_key: str | None = None, model: str | None = None,
                 timeout_s: float = 600.0) -> None:
        import httpx

        super().__init__(tokenizer)
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(base_url=self.base_url + "/v1", headers=headers,
                                        timeout=httpx.Timeout(timeout_s, connect=5.0))
        self.model = model
        self._stats: JSONObject | None = None
        self._metrics_ok: bool | None = None

    async def start(self) -> None:
        """Resolve the model name.

        Raises:
            TargetUnreachableError: nothing answers at ``base_url``, or it is not OpenAI-compatible.
        """
        import httpx

        try:
            resp = await self.client.get("/models")
        except httpx.HTTPError as exc:
            raise TargetUnreachableError(
                f"target {self.base_url} is unreachable ({type(exc).__name__}: {exc or 'no answer'}); "
                "is `loom serve` running there?") from None
        if resp.status_code != 200:
            raise TargetUnreachableError(
                f"target {self.base_url}: GET /v1/models answered {resp.status_code}: {resp.text[:200]}")
        if self.model is None:
            data = resp.json().get("data") or []
            if not data:
                raise TargetUnreachableError(f"target {self.base_url} serves no model")
            self.model = data[0]["id"]

    async def send(self, req: Request) -> Outcome:
        import httpx

        body = {"model": self.model, "messages": req.messages, "stream": True,
                "stream_options": {"include_usage": True}, "temperature": 0.0,
                "max_tokens": req.max_tokens, "seed": req.seed, "return_token_ids": True}
        res = Outcome(send_time=time.monotonic())
        usage: JSONObject | None = None
        text: list[str] = []
        ids: list[int] = []
        try:
            async with self.client.stream("POST", "/chat/completions", json=body) as resp:
                if resp.status_code != 200:
                    res.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode()[:300]}"
                    return res
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    usage = self._event(json.loads(data), res, text, ids) or usage
        except httpx.HTTPError as exc:
            res.error = f"{type(exc).__name__}: {exc}"
            return res
        res.text = "".join(text)
        self._usage(res, usage)
        if ids and len(ids) == len(res.output_ids):  # the server sent its ids: the next prompt reuses them
            res.output_ids = ids
            self.exact_ids = True
        return res

    @staticmethod
    def _event(event: JSONObject, res: Outcome, text: list[str], ids: list[int]) -> JSONObject | None:
        now = time.monotonic()
        for choice in event.get("choices") or []:
            ids.extend(choice.get("token_ids") or [])
            delta = choice.get("delta") or {}
            content = delta.get("content") or ""
            has_content = bool(content or delta.get("tool_calls"))
            if has_content or delta.get("reasoning_content"):
                res.chunks.append(Chunk(now, 1, has_content))
                text.append(content)
            if choice.get("finish_reason"):
                res.finish_reason = choice["finish_reason"]
        return event.get("usage")

    @staticmethod
    def _usage(res: Outcome, usage: JSONObject | None) -> None:
        if usage is None:
            res.output_ids = []
            return
        res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        res.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        n = int(usage.get("completion_tokens") or 0)
        reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
        res.output_ids = [0] * n  # ids are not sent over HTTP; only the count matters
        res.output_classes = ["reasoning"] * min(reasoning, n) + ["output"] * max(0, n - reasoning)

    async def refresh(self) -> None:
        """Scrape a Loom server's ``/metrics`` gauges (KV blocks, running, waiting, preemptions).

        Servers without them (vLLM, OpenAI) leave ``stats()`` at ``None``.
        """
        if self._metrics_ok is False:
            return
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        try:
            resp = await self.client.get(self.base_url + "/metrics")
        except httpx.HTTPError:
            return
        values = {}
        if resp.status_code == 200:
            for fam in text_string_to_metric_families(resp.text):
                for sample in fam.samples:
                    if sample.name in _GAUGES:
                        values[_GAUGES[sample.name]] = int(sample.value)
        self._metrics_ok = len(values) == len(_GAUGES)
        self._stats = values if self._metrics_ok else None

    def stats(self) -> JSONObject | None:
        return self._stats

    async def close(self) -> None:
        await self.client.aclose()


# Loom's /metrics gauge -> engine stats() key
_GAUGES = {"loom_kv_blocks_total": "kv_blocks_total", "loom_kv_blocks_free": "kv_blocks_free",
           "loom_num_requests_running": "num_running", "loom_num_requests_waiting": "num_waiting",
           "loom_num_preemptions": "num_preemptions"}
