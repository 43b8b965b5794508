"""Summarising hidden turns with the model (``ContextBudget(compaction="summarize")``).

A separate, short model call (greedy, ``summary_tokens`` at most) over a
transcript of the turns being hidden (and the previous summary, so summaries
accumulate).  Its tokens are accounted like any call: the instruction as
``system``, the transcript as ``history``.  The summary is shown in the view
after the memory snapshot (see :mod:`orchestrator.compaction`); the stored
turns are untouched.
"""

from __future__ import annotations

from orchestrator.compaction import compute_view
from orchestrator.context import Context, Segment
from orchestrator.items import Item
from orchestrator.ledger import Ledger
from orchestrator.parts import AgentParts
from orchestrator.step import StepOutcome, model_call

INSTRUCTION = ("Summarise the conversation below in a few sentences. Keep facts, decisions, "
               "tool results and open questions; drop pleasantries.")


def transcript(items: list[Item]) -> str:
    """Plain-text transcript of items (role: content, tool calls and results)."""
    lines = []
    for it in items:
        if it.get("kind") == "summary":
            lines.append(f"(earlier summary) {it['content']}")
            continue
        text = it.get("content", "")
        for call in it.get("tool_calls") or []:
            fn = call.get("function", {})
            text += f" [calls {fn.get('name')}({fn.get('arguments')})]"
        lines.append(f"{it.get('role', 'user')}: {text}".strip())
    return "\n".join(lines)


async def summarize_items(parts: AgentParts, items: list[Item], hidden: list[Item], turn: int
                          ) -> tuple[str, Ledger]:
    """Summary text of ``hidden`` (plus the current summary) and the call's ledger."""
    renderer = parts.builder.renderer
    previous = compute_view(items, turn).summary
    text = transcript(([previous] if previous else []) + hidden)
    sys_msgs = [{"role": "system", "content": INSTRUCTION}]
    sys_ids = renderer.encode(renderer.render(sys_msgs, tools=None))
    room = parts.budget.prompt_limit - len(sys_ids) - 16
    body_ids = renderer.encode(text)
    if len(body_ids) > room:
        text = renderer.tokenizer.decode(body_ids[-room:], skip_special_tokens=False)
    full = renderer.render(sys_msgs + [{"role": "user", "content": text}], add_generation_prompt=True, tools=None)
    ids = renderer.encode(full)
    ctx = Context(token_ids=ids, prompt_limit=parts.budget.prompt_limit)
    ctx.segments = [Segment("system", 0, len(sys_ids)), Segment("history", len(sys_ids), len(ids))]
    sp = parts.sampling.clone(max_tokens=parts.budget.summary_tokens, skip_special_tokens=False)
    outcome = StepOutcome()
    outcome.parser.parse_tools = False
    async for _ in model_call(parts.engine, ctx, sp, outcome, turn, 0, parts.prices):
        pass
    summary = (outcome.parser.content or outcome.parser.reasoning).strip() or "(no summary)"
    return summary, outcome.ledger
