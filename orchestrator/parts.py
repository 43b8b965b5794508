"""``AgentParts``: what one turn of an agent runs on, named.

:class:`~loom.orchestrator.agent.Agent` checks its arguments and builds this once;
:class:`~loom.orchestrator.runner.TurnRunner` and the side calls
(:mod:`loom.orchestrator.condense`, :mod:`loom.orchestrator.summarize`) take it (or the
few fields they need) instead of reaching through the ``Agent``, so the
modules form a line ``agent -> runner -> condense / summarize -> step``
with no import back up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loom.orchestrator.budget import ContextBudget
from loom.orchestrator.context import ContextBuilder
from loom.orchestrator.formats import ToolCallFormat
from loom.orchestrator.ledger import PriceTable
from loom.orchestrator.protocols import Memory, ModelClient, Retriever
from loom.orchestrator.retention import RetentionPolicy
from loom.runtime.sampling_params import SamplingParams

#: Hits of the attribution search (``Agent(attribution_k=...)``; ``loom.orchestrator.answer_check``).
DEFAULT_ATTRIBUTION_K = 8

if TYPE_CHECKING:
    from loom.orchestrator.answer_verifier import AnswerVerifier
    from loom.tools import ToolRegistry


@dataclass(frozen=True)
class AgentParts:
    """The collaborators and settings of an agent (see ``Agent``'s arguments).

    Attributes:
        engine: the model client every call goes through.
        builder: the prompt builder (system prompt, tools, budget, format).
        registry: the callable tools.
        sampling: base ``SamplingParams`` of every agent call.
        prices: the ledger's price table.
        eos_token_ids: the engine's end-of-sequence ids (``LLMEngine.eos_token_ids``).
        retriever / memory: ``None`` when the agent has none.
        max_steps ... condense_tokens: the agent's loop settings.
    """

    engine: ModelClient
    builder: ContextBuilder
    registry: ToolRegistry
    sampling: SamplingParams
    prices: PriceTable
    eos_token_ids: frozenset[int]
    retriever: Retriever | None = None
    memory: Memory | None = None
    max_steps: int = 6
    auto_retrieve: bool = True
    memory_namespace: str = "default"
    retrieval_k: int = 4
    similarity_cutoff: float | None = None  # hits under it are not shown (loom.orchestrator.relevance)
    no_match_answer: str | None = None  # the answer, without a model call, when no hit is relevant
    first_answer_k: int | None = 1  # with no_match_answer: hits shown to the first answer (loom.orchestrator.answer_check)
    verifier: AnswerVerifier | None = None  # with no_match_answer: judges answers (answer_verifier)
    attribution_k: int | None = DEFAULT_ATTRIBUTION_K  # with no_match_answer: the attribution search's hits
    memory_k: int = 4
    memory_write_back: bool = True
    condense_question: str | None = "history"  # loom.orchestrator.condense.MODES, None: off
    condense_tokens: int = 32
    parallel_tool_calls: bool | None = None  # None: run every call, force one; True: force may be several
    approval: frozenset[str] = frozenset()  # tools whose calls wait for a human decision (loom.orchestrator.approval)
    # how long the session's KV stays pinned after a reply (None: never; loom.orchestrator.retention)
    retention: RetentionPolicy | None = None

    @property
    def budget(self) -> ContextBudget:
        return self.builder.budget

    @property
    def format(self) -> ToolCallFormat:
        return self.builder.fmt
