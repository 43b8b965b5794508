"""A documentation-QA turn's answer, checked against what the model was shown before anyone sees it.

The runner's side of :mod:`loom.orchestrator.grounding`.  An agent with ``no_match_answer`` set
(a documentation-QA agent) whose retrieval showed passages this turn (:func:`applies`) holds the
content of each reply that makes no tool call until :func:`reasons` has judged it: a grounded
reply is the answer, shown as generated; an ungrounded one (unsupported claims, a restated
question, or no number for a question about a quantity) is replaced by ``no_match_answer``, and
``RunResult.unsupported`` says why (``RunResult.rejected`` keeps the refused answers).

**The top passage first.**  Such a turn's first answer is made from the top ``first_answer_k`` (default 1)
related hits alone (``Agent(first_answer_k=...)``); only when :func:`reasons` rejects it does the model
answer again, shown every related hit, the turn's inputs taken back from the session and stored again
with them (``RunResult.widened``); a second rejection gives ``no_match_answer``.  Shown three
neighbouring sections, a small model often names the wrong one (``os.path.exists`` for broken symbolic
links, whose section, ``os.path.lexists``, ranked first); shown the top one, it answers from that, and a
question the top hit does not answer fails the check and gets the wider view.  Measured on the 494
``qa`` questions (docs/evaluations.md), one question at a time so that runs repeat exactly.

When the search found nothing related and the agent has a tool other than ``search_documents``
(:func:`tools_may_answer`), the model still runs, and its answer stands only once a tool call of the
turn has succeeded: a calculator question over a documentation index is computed (when the model
calls the calculator), an off-topic one is answered ``no_match_answer`` (:data:`NO_TOOL`).  Such a turn
whose message writes out an expression the built-in calculator computes has that call forced
(:func:`arithmetic_expression`): after a documentation turn the small model stops calling it.

**Attribution search.** An answer rejected for the last time (after the wider view, or with nothing to widen
to) only because it names things the shown passages do not hold gets one more search before
``no_match_answer`` is given: the message with those claims appended (:func:`attribution_query`),
``Agent(attribution_k=...)`` hits (default ``loom.orchestrator.parts.DEFAULT_ATTRIBUTION_K``, 8). When hits
not shown yet that clear the agent's similarity cutoff ground every claim, the answer stands and cites them
(:func:`attributed`; ``RunResult.attributed``): the documents state what the model said, in a section the
first search ranked lower. RARR (Gao et al. 2023, "Researching and Revising What Language Models Say")
attributes a model's output this way, by searching for evidence of its claims after it is written. It does not
apply to a claim that is a word of the message (every section about the question holds it, so finding it says
nothing), to a restated question, to a missing quantity or to the verifier's verdict, and not without a
similarity cutoff to judge the hits by. Over Flask's docs, Qwen2.5-Coder-0.5B-Instruct answered "How do I send
the user to a different URL from a view?" with `redirect`, right and refused because no section shown named
it; the search finds the sections that do (``flask.Flask.redirect``, "Following Redirects"). Measured in
docs/evaluations.md.

Before that, a question that names a term the index never uses (:func:`unknown_terms`,
``loom.retrieval.terms``: "punycode" asked of the ``urllib.parse`` docs) is answered
``no_match_answer`` with no model call, as a search that found nothing related is; the retriever
must be able to list its words (``retrieval.Retriever.index_terms``), else the step is skipped.

Asking a restating model again was measured and left out: on the 39 ``qa`` questions whose answer
by Qwen2.5-Coder-0.5B-Instruct only restated the question, one more call shown its reply and "That
only repeats my question. Answer it with the exact name or value that the documents give." made 7
of the 31 answerable ones right (1 was before), but gave a wrong name ("positional", "forloop",
"cli") for 11 others and for 4 of the 8 unanswerable ones, which "not found" answered honestly
(``loom eval run --suite qa --option questions=<the 39 ids>``).
"""

from __future__ import annotations

from collections.abc import Sequence

from loom.json_types import JSONObject
from loom.orchestrator import grounding
from loom.orchestrator.answer_verifier import NOT_STATED
from loom.orchestrator.events import NamedToolChoice
from loom.orchestrator.items import Item, retrieval_passages
from loom.orchestrator.protocols import SearchHit
from loom.orchestrator.turn_state import TurnState
from loom.retrieval import terms
from loom.tools.builtin.calculator import calculator, expression_in
from loom.tools.builtin.search import SEARCH_TOOL_NAME

#: The reason :func:`reasons` gives for an answer that only restates the question.
RESTATED = "(restates the question)"
#: The reason :func:`reasons` gives for an answer to a question about a quantity that states none.
NO_QUANTITY = "(gives no number)"
#: The reason :func:`without_tool` gives: nothing retrieved was related and no tool call succeeded.
NO_TOOL = "(nothing related, no tool called)"


def tools_may_answer(run: TurnState) -> bool:
    """Whether a turn whose search found nothing related may still be answered: the agent has a tool
    other than ``search_documents`` (a calculator, memory tools, an MCP server's) and the turn's
    ``tool_choice`` is not ``"none"``, so the model runs, and its answer stands only once a tool call of
    the turn has succeeded (:func:`without_tool`).  Without such a tool the turn is answered
    ``no_match_answer`` with no model call.  So a documentation chat that also has a calculator says "not
    covered" to a question its documents do not hold and can still compute "365 * 24" (when the model
    calls the tool).  Forcing that first call (``"required"``) was measured and left out: over Click's
    docs, Qwen2.5-Coder-0.5B then computed "98" for "hello" and answered 4 of 6 off-topic questions (none
    without it), from calculator results it made up."""
    return run.choice != "none" and any(name != SEARCH_TOOL_NAME for name in run.parts.registry.names)


#: The turn's ``tool_choice`` when :func:`arithmetic_expression` finds a sum to compute.
ARITHMETIC_CHOICE: NamedToolChoice = {"name": calculator.name}


def arithmetic_expression(run: TurnState) -> str | None:
    """The expression the turn's message writes out (``calculator.expression_in``: "What is 17 * 23?")
    when the agent has the built-in ``calculator`` and the turn's ``tool_choice`` is ``"auto"``; else ``None``.

    Such a message is searched as typed, never joined to the previous one (it is no follow-up), and when
    nothing related is found (:func:`tools_may_answer`) its first call is the calculator's, forced
    (:data:`ARITHMETIC_CHOICE`) with the argument pinned to the expression (:func:`pin_expression`).
    Measured with ``loom chat --index`` over marshmallow's docs, Qwen2.5-Coder-0.5B-Instruct called the
    calculator for 5 of 5 such questions asked first, and for 0 of 4 asked after one documentation turn
    (each answered ``no_match_answer``: :func:`without_tool`).  "hello" or "How many minutes are in 3.5
    hours?" write no expression and are left to the model as before.
    """
    return writes_sum(run) if run.choice == "auto" else None


def writes_sum(run: TurnState) -> str | None:
    """The expression the turn's message writes out when the agent has the built-in ``calculator``, whatever
    the turn's ``tool_choice``; else ``None``.  Such a message is no follow-up of the documents: it is searched
    as typed, never joined to the previous message (a forced ``calculator`` turn of ``loom demo``, "How many
    hours are in a year? Compute 365 * 24.", was searched joined to the turn before it)."""
    if run.parts.registry.get(calculator.name) is not calculator:
        return None
    return expression_in(run.message)


def pin_expression(schemas: list[JSONObject], expression: str) -> list[JSONObject]:
    """``schemas`` (``ToolRegistry.schemas()``) with the calculator's ``expression`` argument fixed to
    ``expression`` (JSON Schema ``const``), so a forced call computes what the message wrote rather than
    the model's copy of it: Qwen2.5-Coder-0.5B-Instruct wrote ``17 + 25 * 3 - 8`` for "Compute (17 + 25) *
    3 - 8." (84, not 118)."""
    out = []
    for schema in schemas:
        fn = schema.get("function")
        if isinstance(fn, dict) and fn.get("name") == calculator.name:
            params = dict(fn["parameters"])
            params["properties"] = {"expression": {"type": "string", "const": expression}}
            schema = {**schema, "function": {**fn, "parameters": params}}
        out.append(schema)
    return out


def without_tool(run: TurnState) -> list[str]:
    """``[NO_TOOL]`` when the turn (nothing related found, :func:`tools_may_answer`) ends without a result of
    a tool other than ``search_documents``, so its answer rests on nothing it was shown; empty once such a
    call succeeded.  A failed call does not count: asked the capital of Peru over Click's docs,
    Qwen2.5-Coder-0.5B called the calculator with ``'capital of Peru'`` five times, got five errors, then
    answered from its own weights; nor does a search, which found nothing related before the model ran."""
    return [] if any(not r.is_error and r.name != SEARCH_TOOL_NAME for r in run.result.tool_results) else [NO_TOOL]


def applies(run: TurnState) -> bool:
    """Whether this turn's answers are checked: ``no_match_answer`` is set and retrieval showed passages."""
    return run.parts.no_match_answer is not None and bool(run.result.retrieved)


def unknown_terms(run: TurnState) -> list[str]:
    """The words of the turn's message that its retriever's index never uses (``loom.retrieval.terms``):
    a question the documents cannot answer, answered ``no_match_answer`` before any model call.  Empty
    when the turn is not checked (:func:`applies`) or the retriever cannot list its words."""
    index_terms = getattr(run.parts.retriever, "index_terms", None)
    if not applies(run) or index_terms is None:
        return []
    return terms.unknown_terms(run.message, index_terms(), ignore=grounding.FILLER)


def reasons(run: TurnState, answer: str, also: Sequence[str] = ()) -> list[str]:
    """Why ``answer`` does not rest on what the model was shown (every item of the view but its system
    prompt: passages, tool results, memory, earlier turns) and the texts ``also``: its unsupported claims,
    ``[RESTATED]``, or ``[NO_QUANTITY]`` (a question about a quantity answered without one); empty when it
    is grounded."""
    shown = [p for i in run.items if i["kind"] != "user" for p in _passages(i)] + list(also)
    g = grounding.check(answer, run.message, shown)
    if g.unsupported:
        return list(g.unsupported)
    return [RESTATED] if g.restates_question else [NO_QUANTITY] if g.no_quantity else []


def _passages(item: Item) -> list[str]:
    """What ``item`` showed the model, a passage each: a retrieval message's ``<document>`` blocks one by one
    (a yes must rest on one of them, ``grounding.check``), any other item's text whole."""
    content = str(item.get("content") or "")
    return retrieval_passages(content) if item["kind"] == "retrieval" else [content]


def attribution_query(run: TurnState, unsupported: Sequence[str]) -> str | None:
    """The attribution search's query for an answer rejected for ``unsupported`` (:func:`reasons`, or the
    verifier's): the message, a space, the claims joined by spaces.  ``None`` when the search does not apply
    (module docstring): the agent has no retriever, no attribution search or no similarity cutoff, or
    ``unsupported`` is not a list of claims, or one of them is a word of the message."""
    a = run.parts
    if a.retriever is None or a.attribution_k is None or a.similarity_cutoff is None or not unsupported:
        return None
    if any(u in (RESTATED, NO_QUANTITY, NO_TOOL, NOT_STATED) or grounding.names_claim(run.message, u)
           for u in unsupported):
        return None
    return " ".join([run.message, *unsupported])


def attributed(run: TurnState, answer: str, hits: Sequence[SearchHit]) -> list[SearchHit]:
    """The hits of the attribution search that ground ``answer``, in rank order: those not shown to the
    model this turn whose similarity clears the agent's cutoff and that hold at least one claim the shown
    passages lack.  Empty unless, with them, :func:`reasons` finds nothing: the answer still stands or falls
    whole."""
    cutoff = run.parts.similarity_cutoff
    shown = {h.chunk_id for h in run.result.retrieved}
    new = [h for h in hits if h.chunk_id not in shown and cutoff is not None
           and (similarity := getattr(h, "similarity", None)) is not None and similarity >= cutoff]
    missing = set(reasons(run, answer))
    holding = [h for h in new if missing - set(reasons(run, answer, [h.text]))]
    return holding if holding and not reasons(run, answer, [h.text for h in holding]) else []
