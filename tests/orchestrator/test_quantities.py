"""The numbers a question states as a quantity of time or size, in every unit of its dimension
(``loom.orchestrator.quantities``; the grounding check's use of them: tests/orchestrator/test_grounding.py)."""

from __future__ import annotations

from loom.orchestrator.quantities import stated_numbers, states_number


def test_an_hour_is_stated_in_seconds_minutes_and_milliseconds():
    assert stated_numbers("How do I make a signed token stop being accepted after an hour?") == {
        "1", "60", "3600", "3600000"}


def test_digits_and_number_words_with_any_spelling_of_the_unit():
    assert {"90", "5400"} <= stated_numbers("Expire it after 90 mins.")
    assert {"172800", "48"} <= stated_numbers("Keep it for two days")
    assert "1.5" in stated_numbers("after 90 minutes")  # hours, three decimals at most
    assert "0.042" not in stated_numbers("an hour") and "0.041667" not in stated_numbers("an hour")


def test_a_decimal_size_prefix_is_read_as_powers_of_1000_and_of_1024():
    assert {"1000000", "1048576", "1024", "1000"} <= stated_numbers("Limit uploads to 1 MB.")
    assert "1000" not in stated_numbers("Limit uploads to 1 MiB.")


def test_a_number_without_a_unit_or_a_letter_after_a_is_no_quantity():
    assert stated_numbers("What is the default timeout in seconds of read_text?") == frozenset()
    assert stated_numbers("Is a b an h?") == frozenset()


def test_states_number_compares_values_not_spellings():
    assert states_number("after an hour", "3600") and states_number("after an hour", "3600.0")
    assert not states_number("after an hour", "7200") and not states_number("after an hour", "abc")
