"""``qa`` and ``tools`` targets: one scored agent turn per conversation.

Each conversation is one question (``qa``) or one prompt (``tools``), run as a
single ``orchestrator.Agent`` turn in a fresh ``InMemorySession`` on the
in-process engine, greedy (temperature 0).  The record is the ``rag``
target's (latency from streamed events, the agent's ledger per class) plus the
score of the turn (:mod:`loom.evals.qa`, :mod:`loom.evals.toolcalls`), and the
variant's summary gets a ``quality`` block from the scored records.

* ``qa``: no tools, one model call (``max_steps=1``); with ``retrieval=on``
  the agent retrieves ``retrieval_k`` chunks for the question from its set's
  index (:func:`open_qa_indexes`: one index per question set, covering the
  set's whole corpus, so a subset faces the same distractors); ``retrieval=off``
  runs the same agent without a retriever.  Beside the facts, a record holds
  whether the answer says "not found", the sections it rests on
  (``orchestrator.citations.check_answer``: cited, else attributed by word
  overlap) and how many of them are gold, and the copy baseline's scores.
* ``tools``: the tools of :func:`loom.evals.toolcalls.eval_tools`, ``tool_choice="auto"``
  (never forced), one model call: the first call of the reply is scored.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loom.evals.records import Outcome, make_record
from loom.evals.targets.base import RunContext
from loom.evals.targets.inproc import InprocTarget
from loom.evals.targets.rag import agent_turn, open_corpus_index
from loom.evals.workloads import Conversation, Workload
from loom.json_types import JSONObject
from loom.orchestrator.parts import DEFAULT_ATTRIBUTION_K
from loom.orchestrator.relevance import NOT_FOUND_ANSWER

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
        self._agents: dict[tuple[str, str, int], Any] = {}

    def agent_kwargs(self, scope: str = "") -> dict[str, Any]:
        """``orchestrator.Agent`` arguments of the suite (tools, retriever ...) for conversations of ``scope``."""
        return {}

    def scope(self, conv: Conversation) -> str:
        """Which agent arguments ``conv`` needs (``qa``: its question set); ``""``: the suite's only ones."""
        return ""

    def _agent(self, system: str, max_tokens: int, scope: str = "") -> Any:
        from loom.orchestrator import Agent, ContextBudget
        from loom.runtime import SamplingParams

        key = (scope, system, max_tokens)
        if key not in self._agents:
            kwargs = self.agent_kwargs(scope)
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
        agent = self._agent(conv.system, turn.max_tokens, self.scope(conv))
        out, result = await agent_turn(agent, InMemorySession(), turn.user, turn.tool_choice)
        scored = self.score(conv, out, result)
        ctx.emit(make_record(out, [], ctx.prices, ctx.t0, ledger=result.usage if result is not None else None,
                             variant=ctx.variant, conversation=conv.id, turn=0,
                             request_id=f"{ctx.variant}-{conv.id}", max_tokens=turn.max_tokens,
                             tool_choice=turn.tool_choice, answer=out.text, **(scored or {})))


class QATarget(ScoredAgentTarget):
    """Questions of :mod:`loom.evals.qa`, answered with or without retrieval.

    Each question set retrieves from its own index (``retrievers``), so a set's scores do
    not depend on which other sets run beside it.

    Args:
        retrievers: per set name, ``(retrieval.Retriever, docs root)`` (root ``None``: the
            ``stdlib:`` corpus); ``None`` or empty: no retrieval.
        retrieval_k: chunks retrieved per question.
        max_retrieval_tokens: cap of the retrieval message (tokens).
        index_set: every question searches this set's index (``""``: each its own set's); a question
            of another set is then off topic, right when answered "not found".
        similarity_cutoff: the agent's ``similarity_cutoff`` (``"auto"``: the retriever's measured one).
        no_match_answer: the agent's ``no_match_answer`` (``None``: the model answers off-topic questions too).
        first_answer_k: the agent's ``first_answer_k`` (hits its first answer is made from; ``None``: all).
        verifier: the agent's ``verifier`` (``orchestrator.answer_verifier.AnswerVerifier``; its engine is shut
            down on ``close``), from the variant settings ``verifier=<model>`` and ``verifier_threshold=<nats>``.
        attribution_k: the agent's ``attribution_k`` (hits of the attribution search; ``None``: none).
    """

    name = "qa"

    def __init__(self, llm: Any, retrievers: dict[str, tuple[Any, Any]] | None = None, retrieval_k: int = 3,
                 max_retrieval_tokens: int = 640, budget: JSONObject | None = None, index_set: str = "",
                 similarity_cutoff: float | str | None = "auto", no_match_answer: str | None = None,
                 first_answer_k: int | None = 1, verifier: Any = None,
                 attribution_k: int | None = DEFAULT_ATTRIBUTION_K) -> None:
        from loom.evals.qa import question_by_id

        super().__init__(llm, budget)
        self.retrievers = dict(retrievers or {})
        self.retrieval_k, self.max_retrieval_tokens = retrieval_k, max_retrieval_tokens
        self.index_set, self.similarity_cutoff, self.no_match_answer = index_set, similarity_cutoff, no_match_answer
        self.first_answer_k, self.verifier, self.attribution_k = first_answer_k, verifier, attribution_k
        self.questions = question_by_id()
        self.index_info: JSONObject | None = None

    @property
    def retrieval(self) -> bool:
        return bool(self.retrievers)

    def scope(self, conv: Conversation) -> str:
        if self.index_set:
            return self.index_set
        q = self.questions.get(conv.id)
        return q.qa_set if q is not None else next(iter(self.retrievers), "")

    def agent_kwargs(self, scope: str = "") -> dict[str, Any]:
        retriever = self.retrievers[scope][0] if scope in self.retrievers else None
        return {"retriever": retriever, "retrieval_k": self.retrieval_k, "similarity_cutoff": self.similarity_cutoff,
                "no_match_answer": self.no_match_answer, "first_answer_k": self.first_answer_k,
                "verifier": self.verifier, "attribution_k": self.attribution_k,
                "budget": {"max_retrieval_tokens": self.max_retrieval_tokens}}

    def score(self, conv: Conversation, out: Outcome, result: Any) -> JSONObject | None:
        from loom.evals.qa import says_not_found, score_answer

        q = self.questions.get(conv.id)
        if q is None:
            return None
        fields: JSONObject = {"question_id": q.id, "qa_set": q.qa_set, "module": q.module, "document": q.document,
                              "section": q.section, "answerable": q.answerable, "first_sentence": q.first_sentence,
                              "not_found": says_not_found(out.text)}
        if self.retrieval and self.index_set and q.qa_set != self.index_set:
            fields.update(offtopic=True, correct=fields["not_found"],
                          retrieved_sections=len(getattr(result, "retrieved", None) or []))
            return fields
        if q.answerable:
            s = score_answer(out.text, q.facts, q.question)
            fields.update(correct=s.correct, fact_fraction=s.fraction, matched=list(s.matched))
        else:
            fields["correct"] = fields["not_found"]
        if self.retrieval:
            fields.update(self._grounding(q, out, result, conv.turns[0].max_tokens))
        return fields

    def _grounding(self, q: Any, out: Outcome, result: Any, max_tokens: int) -> JSONObject:
        """Where the answer came from: the retrieved sections, the cited ones (gold or not), the copy baseline,
        and the answers the agent's check refused (``rejected``)."""
        from loom.evals.qa import hit_gold_key, says_not_found, score_answer
        from loom.orchestrator.citations import check_answer

        root = self.retrievers[q.qa_set][1] if q.qa_set in self.retrievers else None
        hits = list(getattr(result, "retrieved", None) or [])
        keys = [list(hit_gold_key(h, root)) for h in hits]
        sources = [list(hit_gold_key(s.hit, root)) for s in check_answer(out.text, hits).sources] if hits else []
        context = "\n".join(h.text for h in hits)
        copy = copy_baseline(context, self.tokenizer, max_tokens)
        fields: JSONObject = {"retrieved_sections": keys, "sources": sources, "copy_not_found": says_not_found(copy),
                              "unknown_terms": list(getattr(result, "unknown_terms", None) or []),
                              "widened": bool(getattr(result, "widened", False)),
                              "attributed": [list(hit_gold_key(h, root)) for h in getattr(result, "attributed", ())],
                              "rejected": list(getattr(result, "rejected", None) or []),
                              "verifier_margins": list(getattr(result, "verifier_margins", None) or [])}
        if q.answerable:
            golds = [list(g) for g in q.golds]  # the gold section, and any other that states the answer
            # Was the answer in what the model was shown? (Separates retrieval misses from model misses.)
            fields.update(section_retrieved=any(g in keys for g in golds),
                          sources_gold=sum(s in golds for s in sources),
                          facts_in_context=bool(hits) and score_answer(context, q.facts).correct,
                          copy_correct=bool(hits) and score_answer(copy, q.facts).correct)
        return fields

    async def close(self) -> None:
        if self.verifier is not None:
            self.verifier.shutdown()
        await super().close()

    def quality(self, records: list[JSONObject]) -> JSONObject:
        from loom.evals.qa import qa_quality

        return {**qa_quality(records), "retrieval": self.retrieval}

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

    def agent_kwargs(self, scope: str = "") -> dict[str, Any]:
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
        retrievers: dict[str, tuple[Any, Any]] = {}
        info: JSONObject | None = None
        if mode in ("on", "true"):
            retrievers, info = await asyncio.to_thread(open_qa_indexes, workload)
        llm = await asyncio.to_thread(AsyncLLM.from_config, EngineConfig(model=model, **engine))
        verifier = None
        if settings.get("verifier"):
            from loom.orchestrator.answer_verifier import AnswerVerifier

            verifier = await asyncio.to_thread(AnswerVerifier.from_model, str(settings["verifier"]),
                                               float(settings.get("verifier_threshold", 0.0)))
        qa = QATarget(llm, retrievers, p["retrieval_k"], p["max_retrieval_tokens"], budget, p.get("index") or "",
                      settings.get("similarity_cutoff", "auto"), settings.get("no_match_answer", NOT_FOUND_ANSWER),
                      settings.get("first_answer_k", 1), verifier,
                      settings.get("attribution_k", DEFAULT_ATTRIBUTION_K))
        qa.index_info = info
        return qa
    if workload.suite == "tools":
        llm = await asyncio.to_thread(AsyncLLM.from_config, EngineConfig(model=model, **engine))
        return ToolsTarget(llm, budget)
    raise ValueError(f"suite: {workload.suite!r} has no agent target")


def open_qa_indexes(workload: Workload) -> tuple[dict[str, tuple[Any, Any]], JSONObject]:
    """One index per question set the workload's questions come from, fetching a set's docs on first use.

    Options: ``corpus`` replaces the ``stdlib`` set's ingest paths (default: every module its questions
    touch); ``index_dir`` is the parent of the sets' index folders (``<index_dir>/<set>``).

    Returns:
        per set, ``(retriever, docs root)``, and per set what :func:`open_corpus_index` reports.
    """
    from loom.evals.qa import QA_SETS, corpus_for, docs_root, load_set, question_by_id

    p, questions = workload.params, question_by_id()
    used = ({p["index"]} if p.get("index") else
            {questions[c.id].qa_set for c in workload.conversations if c.id in questions})
    retrievers: dict[str, tuple[Any, Any]] = {}
    info: JSONObject = {}
    for name in (n for n in QA_SETS if n in used):
        corpus = (p["corpus"] if name == "stdlib" else "") or corpus_for(load_set(name), name)
        index_dir = Path(p["index_dir"]) / name if p["index_dir"] else None
        retriever, info[name] = open_corpus_index(corpus, index_dir)
        retrievers[name] = (retriever, docs_root(name))
        logger.info("qa index %s: %d chunks, %s in %.1f s", name, info[name]["chunks"],
                    "ingested" if info[name]["ingested"] else "reused", info[name]["seconds"])
    return retrievers, info


def copy_baseline(context: str, tokenizer: Any, max_tokens: int) -> str:
    """What a "model" that copies the retrieved text would answer: its first ``max_tokens`` tokens (the
    answer's own cap) under the served model's tokenizer.  A score above this baseline's is the model's."""
    ids = tokenizer.encode(context, add_special_tokens=False)[:max_tokens]
    return str(tokenizer.decode(ids))
