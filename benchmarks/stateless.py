"""Stateless-client driver: an 8-turn conversation through the official ``openai`` client, resending
the whole history every turn, as every OpenAI-client application does.

``conversation(client)`` returns, for turns 2..8, the share of the previous
turn's ``prompt_tokens + completion_tokens`` that came back as
``cached_tokens``.  ``tests/api/test_stateless_prefix_cache.py`` asserts it;
on another model (starts its own ``loom serve``)::

    python -m benchmarks.stateless --model qwen2.5-coder-0.5b-instruct
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import httpx

QUESTIONS = ["Hi! Who are you?", "What is a KV cache?", "Why does prefix caching help a chat?",
             "Give me a haiku about GPUs.", "What is 17 times 3?", "Name three sorting algorithms.",
             "Summarise our chat so far.", "Thanks, bye!"]


def conversation(client: Any, max_tokens: int = 48) -> list[float]:
    """Run the conversation (sampled replies, temperature 1, seed = turn); cached share per turn from 2."""
    messages = [{"role": "system", "content": "You are a concise assistant."}]
    previous, ratios = None, []
    for turn, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        r = client.chat.completions.create(model="loom", messages=messages, max_tokens=max_tokens, seed=turn,
                                           temperature=1.0)
        if previous is not None:
            ratios.append(r.usage.prompt_tokens_details.cached_tokens / previous)
        previous = r.usage.prompt_tokens + r.usage.completion_tokens
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
    return ratios


def reuse_counters(url: str) -> dict[str, float]:
    """``loom_generated_ids_reuse_total`` by result and the reused tokens, from ``/metrics``."""
    text = httpx.get(url + "/metrics").text
    out = {m.group(1): float(m.group(2))
           for m in re.finditer(r'^loom_generated_ids_reuse_total\{result="(\w+)"\} (\S+)$', text, re.M)}
    m = re.search(r"^loom_generated_ids_reused_tokens_total (\S+)$", text, re.M)
    out["reused_tokens"] = float(m.group(1)) if m else 0.0
    return out


def main() -> None:
    import tempfile

    import openai

    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model
    from tests.api.server import Server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=SMALL_MODEL, help="registered model name or checkpoint folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loom-stateless-"))
    path = ensure_model(args.model) if not Path(args.model).exists() else Path(args.model)
    srv = Server(path, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--max-model-len", "4096").start()
    try:
        ratios = conversation(openai.OpenAI(base_url=srv.url + "/v1", api_key="unused"))
        print("cached share of the previous turn, turns 2-8:", [round(x, 3) for x in ratios])
        print("generated-id reuse:", reuse_counters(srv.url))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
