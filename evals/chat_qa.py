"""Documentation QA as ``loom chat --index`` asks it: the chat's own agent, several questions a chat.

``python -m loom.evals.chat_qa [--model M] [--qa-sets click] [--num-questions N] [--always-answer]``
takes the ``qa`` suite's questions (:mod:`loom.evals.qa`) and, for each set, builds the agent
``loom chat --index`` builds (``loom.orchestrator.chat_agent``: its system prompt, which asks for a short answer
citing its sources, the calculator beside ``search_documents``, 256 reply tokens, 1,024 tokens of
history) over the set's index (the one the ``qa`` suite ingests, under ``$LOOM_CACHE/evals``), and
asks ``--questions-per-chat K`` (default 4) consecutive questions in one chat, one after another, as
a user does.  Without ``--always-answer`` the chat is what ``loom chat --index`` is by default, a
documentation-QA chat (``no_match_answer`` "The indexed documents do not cover this."); with it,
the model answers every question.

Each answer is scored as :mod:`loom.evals.serve_qa` scores the served ones
(:func:`loom.evals.serve_qa.is_right`: the ``qa`` suite's facts as whole tokens; "not found", or "no" to a
yes/no question, for an unanswerable one) and reported the same way (:func:`loom.evals.serve_qa.report`);
``--json PATH`` writes every record, with why a refused answer was refused (``unsupported``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from loom.evals.serve_qa import ServedAnswer, gold_shown, is_right, question_arguments, report, selected_sets


def ask(agent: Any, questions: Sequence[Any]) -> list[ServedAnswer]:
    """``questions`` asked one after another in one new chat (an in-memory session), each answer scored.

    Raises:
        loom.runtime.errors.LoomError: the engine failed a turn.
    """
    from loom.evals.qa import repeats, says_not_found
    from loom.orchestrator.items import source_label
    from loom.orchestrator.session import InMemorySession

    session = InMemorySession()
    records = []
    for turn_index, question in enumerate(questions, 1):
        result = agent.run(question.question, session=session)
        answer = result.answer or ""
        sources = list(dict.fromkeys(source_label(h) for h in result.retrieved))
        records.append(ServedAnswer(
            id=question.id, qa_set=question.qa_set, question=question.question, answerable=question.answerable,
            answer=answer, state=result.final_state, finish_reason=result.finish_reason, sources=sources,
            gold_shown=gold_shown(question.golds, sources),
            correct=is_right(question, answer),
            not_found=says_not_found(answer), completion_tokens=result.usage.completion_tokens,
            turn=turn_index, repeats=repeats(answer), unsupported=list(result.unsupported),
            no_match=result.no_match))
    return records


def run(model: str, qa_sets: Sequence[str], num_questions: int | None = None, seed: int = 0,
        questions_per_chat: int = 4, always_answer: bool = False,
        verifier_model: str | None = None) -> list[ServedAnswer]:
    """Ask each set's questions (the seeded sample of ``num_questions`` per set that
    :mod:`loom.evals.serve_qa` takes, or all) through ``loom chat``'s agent, ``questions_per_chat`` a chat;
    returns the records in question order.  ``verifier_model``: ``loom chat --verifier-model``.

    Raises:
        ValueError: ``questions_per_chat`` below 1.
    """
    if questions_per_chat < 1:
        raise ValueError(f"questions_per_chat must be at least 1, got {questions_per_chat}")
    from loom.evals.qa import corpus_for, load_set
    from loom.evals.targets.rag import open_corpus_index
    from loom.orchestrator.chat_agent import chat_agent, default_no_match_answer
    from loom.runtime import AsyncLLM

    records: list[ServedAnswer] = []
    llm = AsyncLLM(model)
    verifier = None
    try:
        if verifier_model is not None:
            from loom.orchestrator.answer_verifier import AnswerVerifier

            verifier = AnswerVerifier.from_model(verifier_model)
        for qa_set in qa_sets:
            questions = list(load_set(qa_set))
            if num_questions is not None and num_questions < len(questions):
                questions = random.Random(seed).sample(questions, num_questions)
            retriever, info = open_corpus_index(corpus_for(load_set(qa_set), qa_set))
            agent = chat_agent(llm, retriever, no_match_answer=default_no_match_answer(
                info["index_dir"], None, None, always_answer), verifier=verifier)
            for i in range(0, len(questions), questions_per_chat):
                records += ask(agent, questions[i:i + questions_per_chat])
    finally:
        llm.shutdown()
        if verifier is not None:
            verifier.shutdown()
    return records


def main(argv: Sequence[str] | None = None) -> None:
    from loom.runtime.checkpoint.registry import default_model

    parser = question_arguments("python -m loom.evals.chat_qa", __doc__.split("\n")[0])
    parser.add_argument("--questions-per-chat", type=int, default=4,
                        help="consecutive questions asked in one chat (default 4)")
    parser.add_argument("--always-answer", action="store_true",
                        help="the model answers every question (loom chat --always-answer)")
    parser.add_argument("--verifier-model", default=None,
                        help="a second model that judges each answer (loom chat --verifier-model)")
    args = parser.parse_args(argv)
    sets = selected_sets(parser, args)
    records = run(args.model or default_model(), sets, args.num_questions, args.seed, args.questions_per_chat,
                  args.always_answer, args.verifier_model)
    report(records, args.json, by_turn=args.questions_per_chat > 1)


if __name__ == "__main__":
    main()
