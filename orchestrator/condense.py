"""Condense-question: a follow-up made searchable on its own before retrieval.

Two modes (``Agent(condense_question=...)``):

* ``"history"`` (default): the message as typed when that search is related to it (its best
  hit clears the similarity cutoff, :mod:`loom.orchestrator.relevance`), else the previous user
  message and this one joined (:func:`history_query`); no model call (with no cutoff to judge
  by, always joined);
* ``"model"``: the model rewrites the follow-up into a standalone question, and the search
  fuses the rewrite with the message as typed (described below).

Measured with ``python -m loom.evals.followups`` (46 follow-ups made from the ``qa`` questions,
"Tell me about json.dumps." then "Which keyword argument of it ...?", and 46 sessions whose
second question stands alone; gold section in the top 3 / top 2, SmolLM2-135M-Instruct):

==============================  =============  =============
turn 2 searched                   follow-up     standalone
==============================  =============  =============
as typed                         78.3 / 71.7    100 / 100
model rewrite                    100 / 87.0     97.8 / 97.8
rewrite + typed (fused)          91.3 / 89.1    89.1 / 91.3
joined messages                  97.8 / 95.7    100 / 100
typed if related, else joined    91.3 / 87.0    100 / 100
==============================  =============  =============

(Only the typed message's identifiers put their entries first, whatever the query.)  The joined
messages alone do best here, but these standalone questions all name an API entry: one that
names none loses to the previous topic ("What does the with statement do?" after "What does
functools.lru_cache do?"), and fusing the two rankings puts chunks middling in both first.
Searching as typed whenever that is related keeps standalone questions whole, matches the model
rewrite's fusion on follow-ups with no model call, and is the default; the rewrite is opt-in.

The model rewrite, in detail:

"and for tar files?" retrieves nothing useful on its own.  As LlamaIndex's
``CondenseQuestionChatEngine`` does, the agent first asks the model to
rewrite the follow-up into a standalone question ("How do I extract a tar
file in Python?") and searches with that.  Two choices differ from LlamaIndex:

1. **The rewrite call reuses the session's prompt.**  Its prompt is the next
   call's own prefix (template header, tools, memory snapshot, the stored
   history, exactly as :class:`~loom.orchestrator.context.ContextBuilder` assembles
   it) plus one instruction message, so the runtime's prefix cache serves all
   but the instruction: the rewrite costs about 60 computed prompt tokens and
   its own output, not a re-prefill of the conversation as a transcript.  The
   instruction is never stored; the session log stays append-only.
2. **The search fuses the rewrite with the message as typed** (multi-query
   retrieval with reciprocal rank fusion, as RAG-Fusion and LangChain's
   ``MultiQueryRetriever``; :meth:`retrieval.Retriever.search_many`).  Small
   models often answer instead of rewriting, or copy the previous question:
   SmolLM2-135M-Instruct turned "and for tar files?" into "You can use the
   `tar` module to extract zip files." while Qwen2.5-Coder-0.5B wrote "How do
   I extract a tar file in Python?".  Fusing keeps what the user typed in
   the search whatever the rewrite is.

Accounting: the whole prompt of the call is ledger class ``query_rewrite``
(cached and computed, exact as for every call) and its output tokens class
``rewritten_query``, so the cost of condensing is visible on its own.  The
call is greedy, one line, at most ``Agent.condense_tokens`` tokens.  It runs
only when the turn retrieves automatically and the session already has a
user turn.  Off switch: ``Agent(condense_question=False)`` (``loom chat
--no-condense-question``, REST setting ``condense_question``).  A rewrite that
cannot be made (the prompt would not fit, the engine fails) is skipped with a
warning and retrieval uses the message alone.
"""

from __future__ import annotations

import logging
import re
import uuid

from loom.runtime.errors import LoomError
from loom.runtime.sampling_params import SamplingParams

from loom.orchestrator.items import Item, message_item
from loom.orchestrator.ledger import Ledger
from loom.orchestrator.parts import AgentParts
from loom.orchestrator.step import StepOutcome, model_call

logger = logging.getLogger(__name__)

#: The instruction appended (never stored) after the history; ``{question}`` is the follow-up.
INSTRUCTION = ("Rewrite this follow-up question as one standalone question that makes sense without "
               "the conversation above. Reply with the question only.\nQuestion: {question}")
DEFAULT_CONDENSE_TOKENS = 32  # a standalone question; a longer reply is an answer, not a rewrite
PROMPT_CLASS, OUTPUT_CLASS = "query_rewrite", "rewritten_query"
_LEAD = re.compile(r"^\s*(standalone question|rewritten question|question)\s*:\s*", re.IGNORECASE)


MODES = ("history", "model")
HISTORY_WORDS = 48  # of the previous message kept in a history query: a question, not a pasted document


def condense_mode(value: object) -> str | None:
    """``condense_question`` as given to an agent: ``"history"`` (also ``True``), ``"model"``, or ``None``
    (also ``False``: search with the message alone).

    Raises:
        ValueError: anything else.
    """
    if value is None or value is False:
        return None
    if value is True:
        return "history"
    if isinstance(value, str) and value in MODES:
        return value
    raise ValueError(f"condense_question: must be one of {', '.join(MODES)}, True or False, got {value!r}")


def needs_rewrite(items: list[Item]) -> bool:
    """True when the session already holds a user message (so a follow-up can refer back)."""
    return any(it.get("kind") == "user" for it in items)


def previous_message(items: list[Item]) -> str | None:
    """The text of the session's last user message, ``None`` when it has none."""
    return next((str(it.get("content") or "") for it in reversed(items) if it.get("kind") == "user"), None)


def history_query(previous: str, message: str) -> str:
    """The search query of a ``"history"`` turn: the last :data:`HISTORY_WORDS` words of the previous user
    message, then the message as typed."""
    words = previous.split()[-HISTORY_WORDS:]
    return " ".join([*words, message.strip()]) if words else message


def clean_rewrite(text: str) -> str | None:
    """The first non-empty line of the model's reply without labels or quotes; ``None`` if empty."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = _LEAD.sub("", line).strip().strip("\"'`").strip()
    return line or None


def search_queries(message: str, rewrite: str | None) -> list[str]:
    """The queries retrieval fuses: the rewrite first, then the message as typed (no duplicates)."""
    out = [q for q in (rewrite, message) if q and q.strip()]
    return out if len(out) < 2 or out[0].casefold() != out[1].casefold() else out[:1]


async def condense_question(parts: AgentParts, items: list[Item], turn: int, message: str
                            ) -> tuple[str | None, Ledger | None]:
    """Rewrite ``message`` into a standalone question with the model.

    Args:
        parts: the agent's parts (engine, builder, prices, ``condense_tokens``).
        items: the session's stored items before this turn's.
        turn: the turn being run.
        message: the user's message as typed.

    Returns:
        ``(rewrite or None, the call's ledger or None when no call was made)``.
        Errors never propagate: the turn goes on without a rewrite.
    """
    b = parts.builder
    ask = message_item("user", turn, "user", INSTRUCTION.format(question=message), [])
    try:
        b.render_items(items, [ask])
        ctx = b.build(items + [ask], turn)
    except LoomError as exc:  # the history no longer fits: compaction comes later this turn
        logger.warning("query rewrite skipped: %s", exc)
        return None, None
    for seg in ctx.segments:
        seg.cls = PROMPT_CLASS
    sp = SamplingParams(temperature=0.0, max_tokens=parts.condense_tokens, stop=["\n"], skip_special_tokens=False)
    outcome = StepOutcome()
    outcome.parser.parse_tools = False
    try:
        async for _ in model_call(parts.engine, ctx, sp, outcome, turn, 0, parts.prices,
                                  f"rewrite-{uuid.uuid4().hex[:12]}", output_class=OUTPUT_CLASS):
            pass
    except Exception as exc:  # noqa: BLE001 - a failed side call must not end the turn
        logger.warning("query rewrite failed: %s", exc)
        return None, None
    text = outcome.parser.content or outcome.parser.reasoning
    return clean_rewrite(text), outcome.ledger
