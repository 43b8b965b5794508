"""The tool-answer measurement's scoring (``loom.evals.tool_answers``): a result's number read as a whole token."""

from __future__ import annotations

from loom.evals.tool_answers import MARKUP, states_result


def test_the_results_first_number_must_be_a_whole_number_of_the_answer() -> None:
    assert states_result("There are 8,760 hours in a year.", "8760")
    assert states_result("It is 18 degrees in Paris.", "Paris: 18 degrees Celsius, light rain")
    assert states_result("It is 14:30 in Asia/Tokyo.", "It is 14:30 in Asia/Tokyo.")
    assert states_result("About 6.21371 miles.", "6.21371 mi")
    assert not states_result("It is 180 degrees.", "Paris: 18 degrees Celsius")
    assert not states_result("The answer is 7006.", "7006652")
    assert not states_result("", "8760")


def test_call_markup_is_seen_in_any_of_its_shapes() -> None:
    assert MARKUP.search('<tool_call>\n{"name": "calculator"}')
    assert MARKUP.search('```json\n{"name": "calculator", "arguments": {}}\n```')
    assert MARKUP.search("<tool_response>\n8760\n</tool_response>")
    assert not MARKUP.search("The name of the module is asyncio.")
