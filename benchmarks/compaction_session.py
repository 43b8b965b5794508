"""Compaction driver: a retrieval-heavy documentation session in a small window.

One agent session of ``--turns`` questions about the Python standard library
(the ``stdlib:`` documentation shipped with the interpreter, as ``loom demo``
ingests it; MiniLM embeddings, a real FAISS + BM25 index) on the real engine,
in a ``--window``-token window.  Each turn retrieves ``--k`` chunks; earlier
turns' chunks stay in the stored history, so the window fills every few
turns and the agent compacts.  Per turn it prints the cached share of the
turn's prompt tokens (every call the user waits for: the condense rewrite,
an in-turn summary, the answer), the time to the first answer token from
the message, the compactions, the after-turn prefill and whether the
answer rests on this turn's retrieved documents (``loom.orchestrator.citations``).
``tests/orchestrator/test_compaction.py`` runs it (10 turns, 2k window) and asserts the
goals; on another model or for the full 30 turns::

    python -m benchmarks.compaction_session --model qwen2.5-coder-0.5b-instruct --turns 30
    python -m benchmarks.compaction_session --compaction summarize --turns 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CORPUS = ("stdlib:module/json", "stdlib:module/functools", "stdlib:module/collections",
          "stdlib:module/os.path", "stdlib:module/pathlib", "stdlib:module/itertools")
SYSTEM_PROMPT = ("You are a documentation assistant for the Python standard library. Answer the question in one "
                 "or two sentences, using the retrieved documents.")
# (question, the document that answers it): 30 questions over CORPUS, asked in this order.
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("What does json.dumps do?", "json"), ("What does functools.lru_cache do?", "functools"),
    ("What is collections.Counter?", "collections"), ("What does os.path.join do?", "os.path"),
    ("What is pathlib.Path?", "pathlib"), ("What does itertools.chain do?", "itertools"),
    ("How do I parse a JSON string?", "json"), ("What does functools.partial return?", "functools"),
    ("What is a defaultdict?", "collections"), ("What does os.path.exists return?", "os.path"),
    ("How do I read a text file with pathlib?", "pathlib"), ("What does itertools.groupby do?", "itertools"),
    ("What does json.load read from?", "json"), ("What is functools.reduce?", "functools"),
    ("What is collections.deque good for?", "collections"), ("What does os.path.splitext do?", "os.path"),
    ("How do I list a directory with pathlib?", "pathlib"), ("What does itertools.product do?", "itertools"),
    ("What is the indent argument of json.dumps?", "json"), ("What does functools.wraps do?", "functools"),
    ("What is a namedtuple?", "collections"), ("What does os.path.basename return?", "os.path"),
    ("What does Path.resolve do?", "pathlib"), ("What does itertools.islice do?", "itertools"),
    ("Which exception does json raise on bad input?", "json"), ("What does functools.cache do?", "functools"),
    ("What is an OrderedDict?", "collections"), ("What does os.path.abspath do?", "os.path"),
    ("What does Path.glob do?", "pathlib"), ("What does itertools.accumulate do?", "itertools"),
)


@dataclass
class TurnRow:
    """One turn of the session (times in ms, tokens in tokens)."""

    turn: int
    prompt_tokens: int
    cached_tokens: int
    first_token_ms: float
    compactions: int
    compacted_before: bool
    after_turn_tokens: int
    after_turn_cached: int
    after_turn_ms: float
    expected_retrieved: bool
    grounded: bool
    answer: str
    calls: list[list[int]]  # [prompt tokens, cached tokens] of each call the user waited for

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def open_index(path: Path) -> Any:
    """A ``retrieval.Retriever`` in ``path`` over :data:`CORPUS` (ingested the first time only)."""
    from loom.retrieval import Retriever

    r = Retriever.open(path)
    missing = [s for s in CORPUS if s not in set(r.documents())]
    if missing:
        r.ingest(missing, show_progress=False)
    return r


async def run_session(llm: Any, retriever: Any, turns: int = 30, window: int = 4096, max_tokens: int = 48,
                      k: int = 6, condense_question: str = "history", **budget: Any) -> list[TurnRow]:
    """Run the session; one :class:`TurnRow` per turn. ``budget``: more ``ContextBudget`` fields;
    ``condense_question``: the agent's (``"model"`` adds a rewrite call per turn, mostly cached)."""
    from loom.orchestrator import Agent, ContextBudget, InMemorySession
    from loom.orchestrator.citations import check_answer
    from loom.orchestrator.events import ContentDelta, DoneEvent
    from loom.runtime import SamplingParams

    agent = Agent(llm, retriever=retriever, system_prompt=SYSTEM_PROMPT, retrieval_k=k, condense_question=condense_question,
                  budget=ContextBudget(max_model_len=window, reserved_output=max_tokens, **budget),
                  sampling=SamplingParams(temperature=0.0, stop=["\n\n"]))
    session = InMemorySession()
    rows: list[TurnRow] = []
    for turn in range(1, turns + 1):
        question, doc = QUESTIONS[(turn - 1) % len(QUESTIONS)]
        t0 = time.perf_counter()
        first = None
        result = None
        compacted_before = any(it.get("kind") == "compaction" for it in session.get_items()[-1:])
        async for ev in agent.stream(question, session=session):
            if first is None and isinstance(ev, ContentDelta) and ev.text.strip():
                first = (time.perf_counter() - t0) * 1000.0
            if isinstance(ev, DoneEvent):
                result = ev.result
        assert result is not None
        after = getattr(result, "after_turn_usage", None)
        rows.append(TurnRow(
            turn=turn, prompt_tokens=result.usage.prompt_tokens, cached_tokens=result.usage.cached_tokens,
            first_token_ms=first if first is not None else result.timings["total"],
            compactions=result.compactions, compacted_before=compacted_before,
            after_turn_tokens=after.prompt_tokens if after else 0,
            after_turn_cached=after.cached_tokens if after else 0,
            after_turn_ms=result.timings.get("compaction_prefill", 0.0),
            expected_retrieved=any(h.document == f"stdlib:module/{doc}" for h in result.retrieved),
            grounded=bool(check_answer(result.answer, result.retrieved).sources), answer=result.answer,
            calls=[[c.prompt_tokens, c.cached_tokens] for c in result.usage.calls]))
    return rows


def summary(rows: list[TurnRow]) -> dict[str, Any]:
    """Session figures: hit rate (turn calls; and with the after-turn work), worst turn, compactions, TTFT."""
    prompt = sum(r.prompt_tokens for r in rows)
    cached = sum(r.cached_tokens for r in rows)
    after_p = sum(r.after_turn_tokens for r in rows)
    after_c = sum(r.after_turn_cached for r in rows)
    hit = [r for r in rows if r.compacted_before or r.compactions and not r.after_turn_tokens]
    normal = [r for r in rows[1:] if r not in hit]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return {"turns": len(rows), "hit_rate": cached / prompt if prompt else 0.0,
            "hit_rate_with_after_turn": (cached + after_c) / (prompt + after_p) if prompt else 0.0,
            "min_turn_cached_share": min((r.cached_share for r in rows[1:]), default=0.0),
            "compactions": sum(r.compactions for r in rows),
            "first_token_ms_after_compaction": mean([r.first_token_ms for r in hit]),
            "first_token_ms_normal": mean([r.first_token_ms for r in normal]),
            "after_turn_prefill_ms": mean([r.after_turn_ms for r in rows if r.after_turn_ms]),
            "expected_doc_retrieved": sum(r.expected_retrieved for r in rows),
            "grounded_answers": sum(r.grounded for r in rows)}


def print_rows(rows: list[TurnRow]) -> None:
    print(f"{'turn':>4} {'prompt':>6} {'cached':>7} {'first ms':>8} {'compact':>7} {'after tok':>9} "
          f"{'after ms':>8} doc grounded answer")
    for r in rows:
        print(f"{r.turn:>4} {r.prompt_tokens:>6} {r.cached_share:>7.1%} {r.first_token_ms:>8.0f} "
              f"{r.compactions:>4}{'*' if r.compacted_before else ' ':>3} {r.after_turn_tokens:>9} "
              f"{r.after_turn_ms:>8.0f} {'y' if r.expected_retrieved else 'n':>3} "
              f"{'y' if r.grounded else 'n':>8} {r.calls} {r.answer[:40]!r}")


def main() -> None:
    from loom.runtime import AsyncLLM
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=SMALL_MODEL, help="registered model name or checkpoint folder")
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--window", type=int, default=4096, help="ContextBudget.max_model_len (tokens)")
    ap.add_argument("--max-tokens", type=int, default=48, help="answer tokens at most")
    ap.add_argument("--k", type=int, default=6, help="chunks retrieved per turn")
    ap.add_argument("--compaction", default="drop", choices=["drop", "summarize"])
    ap.add_argument("--low-water", type=float, default=None, help="ContextBudget.low_water (default: its own)")
    ap.add_argument("--index", type=Path, default=Path(".loom/compaction-index"))
    ap.add_argument("--json", type=Path, default=None, help="write the rows and the summary here")
    args = ap.parse_args()
    model = args.model if Path(args.model).exists() else str(ensure_model(args.model))
    retriever = open_index(args.index)
    llm = AsyncLLM(model, max_model_len=args.window)
    try:
        extra = {"low_water": args.low_water} if args.low_water is not None else {}
        rows = asyncio.run(run_session(llm, retriever, args.turns, args.window, args.max_tokens, args.k,
                                       compaction=args.compaction, **extra))
    finally:
        llm.shutdown()
    print_rows(rows)
    figures = summary(rows)
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": figures}, indent=1))


if __name__ == "__main__":
    main()
