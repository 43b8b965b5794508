"""Output token classes from the engine's text deltas (``loom.orchestrator.classify``)."""

from __future__ import annotations

from loom.orchestrator.classify import OutputClassifier

PIECES = ["<think>", "\nplan", " it\n", "</think>", "\n\n", "Sure", ".", "<tool_call>",
          '\n{"name": "add", "arguments": {"a": 1}}\n', "</tool_call>"]


def test_one_token_per_output_gets_the_class_of_the_block_it_touches() -> None:
    c = OutputClassifier()
    for piece in PIECES:
        c.feed(piece, 1)
    c.finish()
    assert c.classes == ["reasoning"] * 4 + ["output"] * 3 + ["tool_call"] * 3
    assert c.parser.reasoning == "\nplan it\n" and c.parser.calls[0].arguments == {"a": 1}


def test_a_whole_reply_in_one_output_still_splits_reasoning_from_the_answer() -> None:
    """The sync LLM delivers the reply as one output: its tokens are classed by equal runs of its text."""
    text = "<think>\nplan it\n</think>\n\nSure, the answer is forty-two."
    c = OutputClassifier()
    events = c.feed(text, 12)
    assert len(c.classes) == 12
    assert c.classes[0] == "reasoning" and c.classes[-1] == "output"
    assert c.classes == sorted(c.classes, key=lambda k: k != "reasoning")  # reasoning first, then output
    assert [e.kind for e in events] == ["reasoning", "content"]  # one event per kind, not one per run


def test_a_fixed_output_class_overrides_the_parser() -> None:
    c = OutputClassifier(output_class="rewritten_query")
    c.feed("<think>x</think>y", 3)
    assert c.classes == ["rewritten_query"] * 3


def test_an_output_with_text_but_no_new_token_adds_no_class() -> None:
    c = OutputClassifier()
    c.feed("held back text", 0)
    assert c.classes == [] and c.parser.content == "held back text"
