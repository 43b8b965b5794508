"""A session's first turn after ``loom serve`` restarts: TTFT with the disk KV tier against without, and
against a warm turn.

One ``loom serve`` on the default model (SmolLM2-135M, int4) with ``--kv-tier-dir``: a session with
``cache_control`` (so its KV is pinned, and written to the tier at shutdown) answers ``--turns`` questions
about a long system prompt (a passage of Python's reference docs, ``pydoc_data.topics``); the server is
stopped and started again on the same database and tier folder, and the session answers one more
question.  The same runs again without the tier.  Printed: the warm turns' median TTFT (the ledger's,
engine-side), the first turn after the restart, their ratio, and how many of its prompt tokens came from
the tier.

Run::

    python -m benchmarks.kv_resume --turns 4
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import httpx

from tests.api.server import Server

QUESTIONS = ["What is this passage about?", "Name one keyword it mentions.", "Give an example.",
             "What should a beginner remember?", "Summarise it in one line.", "What is one pitfall?"]


def _system_prompt() -> str:
    from pydoc_data.topics import topics

    return "Answer questions about this passage of Python's reference.\n\n" + topics["assignment"][:3000]


def _run(model: Path, work: Path, turns: int, tier: bool) -> dict[str, float]:
    flags = ["--no-auth", "--max-model-len", "4096", "--quantization", "int4"]
    if tier:
        flags += ["--kv-tier-dir", str(work / "tier")]
    db = f"sqlite:///{work / 'loom.db'}"
    server = Server(model, db, work, *flags).start()
    with httpx.Client(base_url=server.url, timeout=300) as c:
        sid = c.post("/v1/sessions", json={"system_prompt": _system_prompt(), "cache_control":
                                           {"type": "ephemeral", "ttl": "1h"},
                                           "sampling": {"temperature": 0.0, "max_tokens": 24}}).json()["id"]
        warm = [c.post(f"/v1/sessions/{sid}/messages", json={"content": q}).json()["ledger"]["ttft_ms"]
                for q in QUESTIONS[:turns]]
    server.stop()
    server = Server(model, db, work, *flags).start()
    with httpx.Client(base_url=server.url, timeout=300) as c:
        after = c.post(f"/v1/sessions/{sid}/messages", json={"content": QUESTIONS[turns]}).json()
    server.stop()
    return {"warm_ttft_ms": statistics.median(warm[1:]), "after_restart_ttft_ms": after["ledger"]["ttft_ms"],
            "prompt_tokens": after["usage"]["prompt_tokens"], "tier_tokens": after["ledger"]["tier_tokens"]}


def main() -> None:
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=4)
    args = ap.parse_args()
    model = ensure_model(SMALL_MODEL)
    for tier in (True, False):
        with tempfile.TemporaryDirectory() as work:
            f = _run(model, Path(work), args.turns, tier)
        print(f"{'with the disk tier' if tier else 'without a tier':>20}: warm turns' median TTFT "
              f"{f['warm_ttft_ms']:.0f} ms, first turn after the restart {f['after_restart_ttft_ms']:.0f} ms "
              f"({f['after_restart_ttft_ms'] / f['warm_ttft_ms']:.2f}x), {f['tier_tokens']} of its "
              f"{f['prompt_tokens']} prompt tokens from the tier")


if __name__ == "__main__":
    main()
