"""The agent ``loom chat`` runs: its system prompts, history cap, tools and documentation-QA default.

One owner for the chat's configuration, so the terminal chat (``loom.cli.chat``, which opens the index
and the memory database and makes the engine stoppable) and the evaluation that measures it
(``loom.evals.chat_qa``) build the same agent:

* **System prompt**: :data:`DEFAULT_SYSTEM`; with documents, :data:`DOCS_SYSTEM` and the citation
  instruction (:data:`loom.orchestrator.citations.CITE_INSTRUCTION`).
* **Tools**: the calculator; with an index, ``search_documents`` (:func:`loom.orchestrator.relevance.search_tool`);
  with memory, ``remember`` / ``recall`` for the namespace.
* **History**: :data:`CHAT_HISTORY_TOKENS` kept for the next turn, the oldest turns dropped first.
* **Documentation QA by default** (:func:`default_no_match_answer`): with an index and no memory, a
  question the documents do not hold is answered :data:`~loom.orchestrator.relevance.NOT_FOUND_ANSWER`
  (``loom.orchestrator.answer_check``), as a REST session with an index and no memory is.  Measured with
  ``python -m loom.evals.chat_qa --num-questions 40`` against ``--always-answer`` (Qwen2.5-Coder-0.5B int8):
  answerable right 66.1% both ways, unanswerable answered "not covered" 9 of 11 against 0 (68.8% and 9 of 11
  since refused turns are left out of later prompts, ``loom.orchestrator.compaction_plan.compute_view``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the agent's modules load with the engine, not when the CLI starts
    from loom.orchestrator.agent import Agent

DEFAULT_SYSTEM = "You are a helpful assistant."
#: With an index (+ ``CITE_INSTRUCTION``).  Asking for a few sentences and at most one example took 16
#: how-to questions over attrs' docs (Qwen2.5-Coder-0.5B, one chat) from 12 replies cut at 256 tokens
#: and 5 that loop to 8 and 1 (docs/chat-and-documents.md, "Measured").
DOCS_SYSTEM = (DEFAULT_SYSTEM + " Answer from the retrieved documents when they help, in a few sentences and "
               "with at most one short example. ")
#: History a chat keeps for its next turn (tokens; older turns are dropped first).  A small model copies
#: its own earlier answers when a long chat keeps them all: capped, the same 16 questions in one chat
#: gave 2 cut replies and 2 that loop instead of 8 and 1, and no answer copied an earlier one (8 of 10 had).
CHAT_HISTORY_TOKENS = 1024


def default_system(with_documents: bool) -> str:
    """The chat's system prompt: :data:`DOCS_SYSTEM` and the citation instruction with documents, else
    :data:`DEFAULT_SYSTEM`."""
    from loom.orchestrator.citations import CITE_INSTRUCTION

    return DOCS_SYSTEM + CITE_INSTRUCTION if with_documents else DEFAULT_SYSTEM


def default_no_match_answer(index: Path | str | None, db: str | None, no_match_answer: str | None,
                            always_answer: bool) -> str | None:
    """The chat's ``no_match_answer``: the one given; else, with ``index`` and no memory ``db`` and not
    ``always_answer``, :data:`~loom.orchestrator.relevance.NOT_FOUND_ANSWER` (a documentation-QA chat, the
    REST default for a session with an index and no memory); else ``None`` (the model always answers)."""
    if no_match_answer is not None or always_answer or index is None or db is not None:
        return no_match_answer
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER

    return NOT_FOUND_ANSWER


def chat_agent(llm: Any, retriever: Any = None, memory: Any = None, namespace: str = "default",
               system: str | None = None, max_tokens: int = 256, condense_question: str | None = "history",
               no_match_answer: str | None = None,
               max_history_tokens: int | None = CHAT_HISTORY_TOKENS, verifier: Any = None) -> Agent:
    """The chat's agent over ``llm`` (an engine), ``retriever`` (an open ``loom.retrieval.Retriever`` or
    ``None``) and ``memory`` (a ``loom.memory.LongTermMemory`` or ``None``): greedy, ``max_tokens`` per
    model call (tokens), ``system`` (default :func:`default_system`), tools as the module docstring lists;
    ``verifier`` (a ``loom.orchestrator.answer_verifier.AnswerVerifier``) judges its documentation answers.

    Raises:
        ValueError: a budget or sampling value out of range (``max_tokens`` < 1, ``max_history_tokens`` < 1).
    """
    from loom.orchestrator.agent import Agent
    from loom.orchestrator.budget import ContextBudget
    from loom.runtime import SamplingParams
    from loom.tools.builtin import calculator, memory_tools

    tools: list[Any] = [calculator]
    if retriever is not None:
        from loom.orchestrator.relevance import search_tool

        tools.append(search_tool(retriever))
    if memory is not None:
        tools.extend(memory_tools(memory, namespace))
    return Agent(llm, tools=tools, retriever=retriever, memory=memory, memory_namespace=namespace,
                 system_prompt=system if system is not None else default_system(retriever is not None),
                 budget=ContextBudget(reserved_output=max_tokens, max_history_tokens=max_history_tokens),
                 sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                 condense_question=condense_question, no_match_answer=no_match_answer, verifier=verifier)
