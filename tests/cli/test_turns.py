"""The ``Sources:`` line ``loom chat`` prints after an answer (``loom.cli.turns.sources_line``)."""

from __future__ import annotations

from loom.cli.turns import sources_line
from loom.orchestrator.citations import CitationCheck
from loom.orchestrator.events import RunResult, ToolResultRecord
from loom.orchestrator.runner import REPEATED_CALL_NOTE


def test_a_tool_result_the_model_asked_for_again_is_one_source_and_a_failed_call_none() -> None:
    # what Qwen2.5-Coder-0.5B did for "What is 365 * 24?": the same call three times, one result
    results = [ToolResultRecord("a", "calculator", "8760", False, 1),
               ToolResultRecord("b", "calculator", f"8760\n\n{REPEATED_CALL_NOTE}", False, 2),
               ToolResultRecord("c", "calculator", f"8760\n\n{REPEATED_CALL_NOTE}", False, 3),
               ToolResultRecord("d", "calculator", "error: name 'x' is not defined", True, 3)]
    line = sources_line(CitationCheck(), RunResult(answer="8760", tool_results=results))
    assert line == "Sources: tool calculator → 8760"


def test_an_answer_with_no_source_says_why() -> None:
    assert sources_line(CitationCheck(), RunResult(answer="Lima.", no_match=True)) == (
        "Sources: none (no indexed section matches this question)")
