"""Does a turn that calls a tool end with an answer that states the tool's result?

``python -m loom.evals.tool_answers [--model M]`` runs every prompt of the
``tools`` suite that calls for a tool (``evals/data/tool_prompts.json``) as one
agent turn, the expected tool forced for the first call (``tool_choice``), then
the agent's loop (``max_steps`` 3), greedy, and checks each turn's answer:

* **answered**: the turn ended with a non-empty answer (not out of steps);
* **no markup**: the answer holds no tool-call markup (``<tool_call>``, a JSON
  ``"name"``/``"arguments"`` call, ``<tool_response>``);
* **states the result**: the first tool result is not an error, and its first
  number (``8760``, ``18`` of "18 degrees Celsius", ``14`` of "14:30") occurs in
  the answer as a whole token, as the ``qa`` suite matches facts
  (:func:`loom.evals.qa.contains_fact`: ``8,760`` is 8760; ``18`` does not
  match ``180``).

Prints one line per prompt and the shares; ``--json PATH`` writes the records.
It measures the agent loop's answer step (:mod:`loom.orchestrator.runner`);
the tools suite (:mod:`loom.evals.toolcalls`) scores the calls themselves.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from loom.evals.script_args import model_script_parser, write_records

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
MARKUP = re.compile(r"<tool_call>|<tool_response>|\"name\"\s*:|\"arguments\"\s*:")


@dataclass
class ToolAnswer:
    """One turn: the prompt, the calls made, the first result, the answer and its checks."""

    id: str
    prompt: str
    calls: list[str]
    result: str
    answer: str
    final_state: str
    answered: bool
    no_markup: bool
    states_result: bool


def states_result(answer: str, result: str) -> bool:
    """True when the first number of ``result`` (else the whole result) occurs in ``answer`` as whole tokens."""
    from loom.evals.qa import contains_fact

    want = NUMBER.search(result)
    fact = want.group() if want is not None else result.strip()
    return bool(fact) and contains_fact(answer, fact)


async def run(model: str, threads: int = 2, quantization: str | None = "auto") -> list[ToolAnswer]:
    """Run every tool-calling prompt of the tools suite as an agent turn on ``model``; one record each."""
    import torch

    from loom.evals.toolcalls import TOOLS_SYSTEM_PROMPT, eval_tools, load_cases
    from loom.orchestrator import Agent, InMemorySession
    from loom.runtime import AsyncLLM, SamplingParams

    torch.set_num_threads(threads)
    llm = AsyncLLM(model, max_model_len=2048, quantization=quantization)
    out = []
    try:
        agent = Agent(llm, tools=eval_tools(), system_prompt=TOOLS_SYSTEM_PROMPT, max_steps=3,
                      sampling=SamplingParams(temperature=0.0, max_tokens=96))
        for case in load_cases():
            if case.expected_tool is None:
                continue
            res = await agent.arun(case.prompt, session=InMemorySession(), tool_choice=case.expected_tool)
            first = res.tool_results[0] if res.tool_results else None
            result = first.content if first is not None else ""
            answer = res.answer or ""
            out.append(ToolAnswer(
                case.id, case.prompt, [f"{c.name}({json.dumps(c.arguments)})" for c in res.tool_calls], result,
                answer, res.final_state, res.final_state == "done" and bool(answer.strip()),
                not MARKUP.search(answer),
                first is not None and not first.is_error and states_result(answer, result)))
    finally:
        llm.shutdown()
    return out


def summary(records: list[ToolAnswer]) -> dict[str, Any]:
    """Shares of answered, markup-free and result-stating turns (0-1), and their count."""
    n = max(1, len(records))
    return {"turns": len(records), "answered": sum(r.answered for r in records) / n,
            "no_markup": sum(r.no_markup for r in records) / n,
            "states_result": sum(r.states_result for r in records) / n}


def main(argv: list[str] | None = None) -> None:
    parser = model_script_parser("python -m loom.evals.tool_answers", __doc__.split("\n")[0], "smollm2-135m-instruct")
    args = parser.parse_args(argv)
    records = asyncio.run(run(args.model, args.threads))
    for r in records:
        mark = "ok " if r.states_result and r.no_markup else "-- "
        print(f"{mark}{r.id:18} {r.final_state:9} {' → '.join(r.calls)[:60]:60} | {r.answer[:70]!r}")
    s = summary(records)
    print(f"{args.model}: {s['turns']} turns · answered {s['answered']:.1%} · no markup {s['no_markup']:.1%} · "
          f"states the result {s['states_result']:.1%}")
    write_records(args.json, s, records)


if __name__ == "__main__":
    main()
