"""The served documentation-QA measurement's summary (``loom.evals.serve_qa``): accuracy over the answerable,
"not found" over the unanswerable, per set.  The flow it drives (``loom ingest``, ``loom serve --index``, a
session with ``index``) runs for real in tests/api/test_shared_documents.py."""

from __future__ import annotations

from loom.evals.serve_qa import ServedAnswer, pct, summary


def _answer(qa_set: str, answerable: bool, correct: bool, not_found: bool = False, cut: bool = False,
            turn: int = 1) -> ServedAnswer:
    return ServedAnswer(id="q", qa_set=qa_set, question="?", answerable=answerable, answer="a", state="done",
                        finish_reason="length" if cut else "stop", sources=["doc - sec"], gold_shown=answerable,
                        correct=correct, not_found=not_found, completion_tokens=10, turn=turn)


def test_accuracy_counts_the_answerable_and_not_found_the_unanswerable_per_set():
    records = [_answer("click", True, True), _answer("click", True, False, cut=True),
               _answer("click", False, True, not_found=True), _answer("jinja", True, False, not_found=True)]
    s = summary(records)
    assert (s["click"]["accuracy"], s["click"]["not_found"], s["click"]["cut_at_max_tokens"]) == (0.5, 1.0, 1 / 3)
    assert (s["jinja"]["accuracy"], s["jinja"]["not_found"], s["jinja"]["false_not_found"]) == (0.0, None, 1.0)
    assert s["all"]["answerable"] == 3 and s["all"]["unanswerable"] == 1
    assert (pct(0.5), pct(None)) == ("50.0%", "-")


def test_accuracy_is_split_by_the_questions_place_in_its_session():
    records = [_answer("click", True, True, turn=1), _answer("click", True, False, not_found=True, turn=2),
               _answer("click", True, True, turn=3), _answer("click", False, True, not_found=True, turn=2)]
    s = summary(records)["all"]
    assert (s["accuracy_first_turn"], s["accuracy_later_turns"]) == (1.0, 0.5)
    assert s["not_found_later_turns_answerable"] == 0.5  # one of the two later answerable turns said "not found"
