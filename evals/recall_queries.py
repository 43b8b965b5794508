"""Does the model's ``recall`` call search memory for what the user asked about?

``python -m loom.evals.recall_queries [--model M]`` stores the facts of ``evals/data/recall_queries.json``
in a fresh memory namespace (MiniLM, SQLite), then runs each question as one agent turn with the built-in
``remember`` and ``recall`` tools (``loom.tools.builtin.memory_tools``), ``recall`` forced for the first
call, greedy, one step, and scores the call's ``query`` argument:

* **found**: the question's fact is the first memory ``recall`` returned for that query;
* **echo**: the query repeats the parameter's own description (the model copied the schema instead of
  writing a query).

Prints one line per question and the shares; ``--json PATH`` writes the records.  The questions were
written before the tool's description was changed to be measured by them.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loom.evals.script_args import model_script_parser, write_records

DATA = Path(__file__).with_name("data") / "recall_queries.json"


@dataclass
class RecallQuery:
    """One question: the query the model wrote, the first memory it found, the checks."""

    message: str
    query: str
    first: str
    found: bool
    echo: bool


def load() -> tuple[list[str], list[dict[str, Any]]]:
    """(facts, questions) of the data file."""
    data = json.loads(DATA.read_text())
    return data["facts"], data["questions"]


def _normal(text: str) -> str:
    return " ".join(text.lower().strip(" .").split())


async def run(model: str, threads: int = 2, quantization: str | None = "auto") -> list[RecallQuery]:
    """Every question as a forced ``recall`` turn on ``model``; one record each."""
    import torch

    from loom.memory import LongTermMemory
    from loom.orchestrator import Agent, InMemorySession
    from loom.runtime import AsyncLLM, SamplingParams
    from loom.tools.builtin import memory_tools

    torch.set_num_threads(threads)
    facts, questions = load()
    out = []
    with tempfile.TemporaryDirectory(prefix="loom-recall-") as tmp:
        memory = LongTermMemory(Path(tmp) / "memory.db")
        for fact in facts:
            memory.add(fact, "user", source={"kind": "user"})
        tools = memory_tools(memory, "user")
        recall = next(t for t in tools if t.name == "recall")
        described = _normal(recall.parameters["properties"]["query"].get("description", ""))
        llm = AsyncLLM(model, max_model_len=2048, quantization=quantization)
        try:
            agent = Agent(llm, tools=tools, max_steps=1, sampling=SamplingParams(temperature=0.0, max_tokens=64))
            for q in questions:
                res = await agent.arun(q["message"], session=InMemorySession(), tool_choice="recall")
                query = str(res.tool_calls[0].arguments.get("query", "")) if res.tool_calls else ""
                hits = memory.search(query, "user", k=1) if query.strip() else []
                first = hits[0].text if hits else ""
                out.append(RecallQuery(q["message"], query, first, first == facts[q["target"]],
                                       bool(described) and _normal(query) == described))
        finally:
            llm.shutdown()
            memory.close()
    return out


def summary(records: list[RecallQuery]) -> dict[str, Any]:
    """Shares of found and echoed queries (0-1), and the count."""
    n = max(1, len(records))
    return {"questions": len(records), "found": sum(r.found for r in records) / n,
            "echo": sum(r.echo for r in records) / n}


def main(argv: list[str] | None = None) -> None:
    parser = model_script_parser("python -m loom.evals.recall_queries", __doc__.split("\n")[0],
                                 "qwen2.5-coder-0.5b-instruct")
    args = parser.parse_args(argv)
    records = asyncio.run(run(args.model, args.threads))
    for r in records:
        print(f"{'ok ' if r.found else '-- '}{r.message[:48]:48} | query {r.query[:40]!r:42} | {r.first[:40]}")
    s = summary(records)
    print(f"{args.model}: {s['questions']} questions · found {s['found']:.1%} · "
          f"echoed the description {s['echo']:.1%}")
    write_records(args.json, s, records)


if __name__ == "__main__":
    main()
