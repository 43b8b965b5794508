"""A chunk's sentences, as the retriever embeds them for ``Hit.sentence_similarity``: split at sentence ends and
blank lines, short pieces left out, at most ``MAX_SENTENCES`` a chunk."""

from __future__ import annotations

from loom.retrieval.sentences import MAX_SENTENCES, MIN_CHARS, split_sentences


def test_prose_splits_at_a_sentence_end_before_a_capital_letter_or_code():
    text = ("The ferry leaves at 9:15 every day. It does not run on Sundays! Use `ferry.book()` to reserve a seat. "
            "`Ferry.cancel()` undoes it.")
    assert split_sentences(text) == ["The ferry leaves at 9:15 every day.", "It does not run on Sundays!",
                                     "Use `ferry.book()` to reserve a seat.", "`Ferry.cancel()` undoes it."]


def test_dotted_names_numbers_and_lower_case_continuations_do_not_split():
    text = "Call os.path.join with 2.5 or more parts. e.g. this stays whole."
    assert split_sentences(text) == ["Call os.path.join with 2.5 or more parts. e.g. this stays whole."]


def test_a_blank_line_ends_a_piece_so_code_blocks_and_list_items_stand_alone():
    text = "To redirect a user, use redirect::\n\n    return redirect(url_for('login'))\n\nSee errorhandling."
    assert split_sentences(text) == ["To redirect a user, use redirect::", "return redirect(url_for('login'))",
                                     "See errorhandling."]


def test_pieces_shorter_than_the_minimum_are_left_out_unless_nothing_is_longer():
    assert split_sentences("Note:\n\nThe cache holds 128 entries by default.") == [
        "The cache holds 128 entries by default."]
    assert len("Yes. No.") < MIN_CHARS and split_sentences("  Yes. No.  ") == ["Yes. No."]
    assert split_sentences(" \n\n ") == []


def test_a_long_chunk_keeps_its_first_sentences_only():
    text = " ".join(f"Sentence number {i} is here." for i in range(MAX_SENTENCES + 5))
    out = split_sentences(text)
    assert len(out) == MAX_SENTENCES and out[0] == "Sentence number 0 is here." and out[-1].startswith(
        f"Sentence number {MAX_SENTENCES - 1} ")
