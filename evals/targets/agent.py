"""``qa`` and ``tools`` targets: one scored agent turn per conversation.

Each conversation is one question (``qa``) or one prompt (``tools``), run as a
single ``orchestrator.Agent`` turn in a fresh ``InMemorySession`` on the
in-process engine, greedy (temperature 0).  The record is the ``rag``
target's (latency from streamed events, the agent's ledger per class) plus the
score of the turn (:mod:`loom.evals.qa`, :mod:`loom.evals.toolcalls`), and the
variant's summary gets a ``quality`` block from the scored records.

* ``qa``: no tools, one model call (``max_steps=1``); with ``retrieval=on``
  the agent retrieves ``retrieval_k`` chunks for the question from the stdlib
  index before the call (the index covers every module the question set
  touches, so a subset faces the same distractors); ``retrieval=off`` runs the
  same agent without a retriever.
* ``tools``: the tools of :func:`loom.evals.toolcalls.eval_tools`, ``tool_choice="auto"``
  (never forced), one model call: the first call of the reply is scored.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from typing import Any

from loom.evals.records import Outcome, make_record
from loom.evals.targets.base import RunContext
from loom.evals.targets.inproc import InprocTarget
from loom.evals.targets.rag import agent_turn, open_corpus_index
from loom.evals.workloads import Conversation, Workload
from loom.json_types import JSONObject

logger = logging.getLogger(__name__)


class ScoredAgentTarget(InprocTarget):
    """Runs each conversation's single turn through an agent and scores it.

    Args:
        llm: started ``runtime.AsyncLLM`` (shut down on ``close``).
        budget: extra ``orchestrator.ContextBudget`` fields (``budget.*`` variant settings).
    """

    name = "agent"

    def __init__(self, llm: Any, budget: JSONObject | None = None) -> None:
        super().__init__(llm)
        self.budget = dict(budget or {})
        self._agents: dict[tuple[str, int], Any] = {}

    def agent_kwargs(self) -> dict[str, Any]:
        """``orchestrator.Agent`` arguments of the suite (tools, retriever ...)."""
        return {}

    def _agent(self, system: str, max_tokens: int) -> Any:
        from loom.orchestrator import Agent, ContextBudget
        from loom.runtime import SamplingParams

        key = (system, max_tokens)
        if key not in self._agents:
            kwargs = self.agent_kwargs()
            budget = ContextBudget(**{"reserved_output": max_tokens, **kwargs.pop("budget", {}), **self.budget})
            self._agents[key] = Agent(self.llm, system_prompt=system, budget=budget, max_steps=1,
                                      sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens), **kwargs)
        return self._agents[key]

    def score(self, conv: Conversation, out: Outcome, result: Any) -> JSONObject | None:
        """Record fields scoring the turn (``None`` for warm-up conversations)."""
        raise NotImplementedError

    def quality(self, records: list[JSONObject]) -> JSONObject:
        """The variant's ``quality`` block from its scored records."""
        raise NotImplementedError

    def summary_extra(self, records: list[JSONObject]) -> JSONObject:
        """Blocks added to the variant's summary."""
        return {"quality": self.quality(records)}

    async def conversation(self, conv: Conversation, ctx: RunContext) -> None:
        from loom.orchestrator import InMemorySession

        turn = conv.turns[0]
        agent = self._agent(conv.system, turn.max_tokens)
        out, result = await agent_turn(agent, InMemorySession(), turn.user, turn.tool_choice)
        scored = self.score(conv, out, result)
        ctx.emit(make_record(out, [], ctx.prices, ctx.t0, ledger=result.usage if result is not None else None,
                             variant=ctx.variant, conversation=conv.id, turn=0,
                             request_id=f"{ctx.variant}-{conv.id}", max_tokens=turn.max_tokens,
                             tool_choice=turn.tool_choice, answer=out.text, **(scored or {})))


class QATarget(ScoredAgentTarget):
    """Questions of :mod:`loom.evals.qa`, answered with or without retrieval.

    Args:
        retriever: ``retrieval.Retriever`` over the stdlib modules, or ``None`` (no retrieval).
        retrieval_k: chunks retrieved per question.
        max_retrieval_tokens: cap of the retrieval message (tokens).
    """

    name = "qa"

    def __init__(self, llm: Any, retriever: Any = None, retrieval_k: int = 3, max_retrieval_tokens: int = 640,
                 budget: JSONObject | None = None) -> None:
        from loom.evals.qa import question_by_id

        super().__init__(llm, budget)
        self.retriever, self.retrieval_k, self.max_retrieval_tokens = retriever, retrieval_k, max_retrieval_tokens
        self.questions = question_by_id()
        self.index_info: JSONObject | None = None

    def agent_kwargs(self) -> dict[str, Any]:
        return {"retriever": self.retriever, "retrieval_k": self.retrieval_k,
                "budget": {"max_retrieval_tokens": self.max_retrieval_tokens}}

    def score(self, conv: Conversation, out: Outcome, result: Any) -> JSONObject | None:
        from loom.evals.qa import score_answer

        q = self.questions.get(conv.id)
        if q is None:
            return None
        s = score_answer(out.text, q.facts)
        fields: JSONObject = {"question_id": q.id, "module": q.module, "section": q.section,
                                  "correct": s.correct, "fact_fraction": s.fraction, "matched": list(s.matched)}
        if self.retriever is not None:
            # Was the answer in what the model was shown? (Separates retrieval misses from model misses.)
            hits = list(getattr(result, "retrieved", None) or [])
            fields["retrieved_sections"] = [h.section for h in hits]
            fields["section_retrieved"] = any(h.section == q.section for h in hits)
            context = "\n".join(h.text for h in hits)
            fields["facts_in_context"] = bool(hits) and score_answer(context, q.facts).correct
            copy = copy_baseline(context, self.tokenizer, conv.turns[0].max_tokens)
            fields["copy_correct"] = bool(hits) and score_answer(copy, q.facts).correct
        return fields

    def quality(self, records: list[JSONObject]) -> JSONObject:
        from loom.evals.qa import qa_quality

        block = qa_quality(records)
        block["retrieval"] = self.retriever is not None
        if self.retriever is not None and records:
            block["section_retrieved_rate"] = sum(bool(r.get("section_retrieved")) for r in records) / len(records)
            block["facts_in_context_rate"] = sum(bool(r.get("facts_in_context")) for r in records) / len(records)
            block["copy_baseline_accuracy"] = sum(bool(r.get("copy_correct")) for r in records) / len(records)
        return block

    def summary_extra(self, records: list[JSONObject]) -> JSONObject:
        return {**super().summary_extra(records), "index": self.index_info}


class ToolsTarget(ScoredAgentTarget):
    """Prompts of :mod:`loom.evals.toolcalls`, tools offered, tool choice left to the model."""

    name = "tools"

    def __init__(self, llm: Any, budget: JSONObject | None = None) -> None:
        from loom.evals.toolcalls import eval_tools, load_cases

        super().__init__(llm, budget)
        self.cases = {c.id: c for c in load_cases()}
        self.tools = eval_tools()
        # the parameter schemas the model is shown, by tool name
        self.schemas = {t.name: t.openai_schema()["function"]["parameters"] for t in self.tools}

    def agent_kwargs(self) -> dict[str, Any]:
        return {"tools": self.tools}

    def score(self, conv: Conversation, out: Outcome, result: Any) -> JSONObject | None:
        from loom.evals.toolcalls import score_calls

        case = self.cases.get(conv.id)
        if case is None:
            return None
        calls = [(c.name, dict(c.arguments), c.error) for c in result.tool_calls] if result is not None else []
        return {"case_id": case.id, "expected_tool": case.expected_tool,
                "arguments": calls[0][1] if calls else None, "call_error": calls[0][2] if calls else None,
                **asdict(score_calls(case, calls, self.schemas))}

    def quality(self, records: list[JSONObject]) -> JSONObject:
        from loom.evals.toolcalls import tools_quality

        return tools_quality(records)


async def make_agent_target(workload: Workload, model: str, engine: JSONObject, budget: JSONObject,
                            settings: JSONObject) -> ScoredAgentTarget:
    """Start the engine and build the ``qa`` or ``tools`` target of one variant.

    ``settings["retrieval"]`` (``qa``): ``"on"`` (default) or ``"off"``.

    Raises:
        ValueError: an unknown ``retrieval`` value or suite.
    """
    from loom.runtime import AsyncLLM, EngineConfig

    p = workload.params
    if workload.suite == "qa":
        mode = str(settings.get("retrieval", "on")).lower()
        if mode not in ("on", "off", "true", "false"):
            raise ValueError(f"retrieval: must be 'on' or 'off', got {settings.get('retrieval')!r}")
        retriever, info = None, None
        if mode in ("on", "true"):
            from loom.evals.qa import corpus_for, load_questions

            corpus = p["corpus"] or corpus_for(load_questions())
            retriever, info = await asyncio.to_thread(open_corpus_index, corpus, p["index_dir"] or None)
            logger.info("qa index: %d chunks of %d documents, %s in %.1f s", info["chunks"], corpus.count(",") + 1,
                        "ingested" if info["ingested"] else "reused", info["seconds"])
        llm = await asyncio.to_thread(AsyncLLM.from_config, EngineConfig(model=model, **engine))
        qa = QATarget(llm, retriever, p["retrieval_k"], p["max_retrieval_tokens"], budget)
        qa.index_info = info
        return qa
    if workload.suite == "tools":
        llm = await asyncio.to_thread(AsyncLLM.from_config, EngineConfig(model=model, **engine))
        return ToolsTarget(llm, budget)
    raise ValueError(f"suite: {workload.suite!r} has no agent target")


def copy_baseline(context: str, tokenizer: Any, max_tokens: int) -> str:
    """What a "model" that copies the retrieved text would answer: its first ``max_tokens`` tokens (the
    answer's own cap) under the served model's tokenizer.  A score above this baseline's is the model's."""
    ids = tokenizer.encode(context, add_special_tokens=False)[:max_tokens]
    return str(tokenizer.decode(ids))
