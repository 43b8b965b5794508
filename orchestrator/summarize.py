"""Summarising hidden turns with the model (``ContextBudget(compaction="summarize")``).

The summary request is a *continuation of the cached conversation*, as the
condense-question rewrite is (:mod:`loom.orchestrator.condense`): its prompt is
the session's own prompt (template header, tools, memory snapshot, the
current summary, the earlier turns exactly as the last call showed them)
plus one instruction message, so the prefix cache serves everything but the
instruction; a transcript in a new prompt (the old way) prefilled the whole
conversation again (TTFT 6.2x a normal turn).  The instruction is
never stored; the summary is shown after the memory snapshot in place of
the hidden turns (:mod:`loom.orchestrator.compaction_plan`) and the stored turns are
untouched.  The call is greedy, ``summary_tokens`` at most; its tokens are
accounted like any call's (classes of the prompt it extends, the instruction
as ``user``).

When the conversation plus the instruction and the summary would not fit
the window, the prompt leaves out first the documents the compaction hides
anyway, then the turns it keeps (cached up to the first item left out).
"""

from __future__ import annotations

import uuid

from loom.runtime.errors import ContextLengthError

from loom.orchestrator import compaction_plan as comp
from loom.orchestrator.context import Context
from loom.orchestrator.items import Item, message_item
from loom.orchestrator.ledger import Ledger
from loom.orchestrator.parts import AgentParts
from loom.orchestrator.step import StepOutcome, model_call

INSTRUCTION = ("Summarise the conversation above in a few sentences. Keep facts, decisions, tool results "
               "and open questions; drop pleasantries. Reply with the summary only.")


def summary_prompt(parts: AgentParts, items: list[Item], turn: int, docs: list[list[int]],
                   turns: list[list[int]]) -> Context:
    """The summary request: the earlier turns of ``turn``'s view + the instruction (never stored).

    Args:
        docs / turns: the document groups and whole-turn groups the compaction hides.

    Raises:
        ContextLengthError: not even the hidden turns alone fit with the instruction.
    """
    b = parts.builder
    view = comp.compute_view(items, turn)
    kept = [[i] for i in view.history if i not in {j for g in docs + turns for j in g}]
    ask = message_item("user", turn, "user", INSTRUCTION, [])
    b.render_items(items, [ask])
    room = parts.budget.window - parts.budget.summary_tokens
    error: ContextLengthError | None = None
    for leave_out in ([], docs, docs + kept):  # most cached first
        probe = items + [comp.marker(turn, [view.tail] + leave_out), ask]
        try:
            ctx = b.build(probe, turn)
        except ContextLengthError as exc:
            error = exc
            continue
        if len(ctx.token_ids) <= room:
            return ctx
        error = ContextLengthError(f"summary request of {len(ctx.token_ids)} tokens leaves no room for "
                                   f"{parts.budget.summary_tokens} summary tokens", param="summary_tokens")
    assert error is not None
    raise error


async def summarize_turns(parts: AgentParts, items: list[Item], turn: int, docs: list[list[int]],
                          turns: list[list[int]]) -> tuple[str, Ledger]:
    """Summary text of the conversation before ``turn`` (see :func:`summary_prompt`) and the call's ledger.

    Raises:
        whatever the engine raises (the caller decides whether a failed summary fails the turn).
    """
    ctx = summary_prompt(parts, items, turn, docs, turns)
    room = max(1, parts.budget.window - len(ctx.token_ids))
    sp = parts.sampling.clone(max_tokens=min(parts.budget.summary_tokens, room), skip_special_tokens=False)
    outcome = StepOutcome()
    outcome.parser.parse_tools = False
    async for _ in model_call(parts.engine, ctx, sp, outcome, turn, 0, parts.prices,
                              f"summary-{uuid.uuid4().hex[:12]}"):
        pass
    summary = (outcome.parser.content or outcome.parser.reasoning).strip() or "(no summary)"
    return summary, outcome.ledger
