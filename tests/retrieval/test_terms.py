"""``loom.retrieval.terms``: the words of a question that an index never uses, on a real MiniLM + FAISS + BM25
index: code, common English and the documents' own words in other forms are never unknown."""

from __future__ import annotations

import pytest

from loom.retrieval.terms import IndexTerms, common_words, stem, unknown_terms

from tests.retrieval.helpers import index_of

DOCS = {
    "parse.md": "# urllib.parse\n\nurlparse(urlstring, scheme='', allow_fragments=True) splits a URL into six "
                "components. The netloc holds the host name and an optional port. Parsing never deduces "
                "a scheme that the string does not give.",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return index_of(tmp_path_factory, DOCS, name="terms")


def test_a_subject_the_documents_never_mention_is_unknown(index):
    stems = index.index_terms()
    assert unknown_terms("Which argument of urllib.parse.urlparse converts the host name to punycode?",
                         stems) == ["punycode"]


def test_common_english_and_the_documents_words_in_other_forms_are_known(index):
    stems = index.index_terms()
    # "splitting"/"components" are the page's "splits"/"components"; "happens" and "hostname's" are English
    assert unknown_terms("What happens when splitting a URL into its components?", stems) == []
    assert unknown_terms("Which scheme is deduced when parsing?", stems) == []


def test_a_code_name_is_unknown_when_neither_it_nor_its_last_part_is_in_the_index(index):
    terms = index.index_terms()
    question = "Does urllib.parse.urlparse() take `scheme` and allow_fragments, or max_netloc and url_parse.to_idna?"
    assert unknown_terms(question, terms) == ["max_netloc", "url_parse.to_idna"]
    # a word inside code is not read again as a word: "punycode" here is one unknown name, not two terms
    assert unknown_terms("Is `to_punycode()` a function?", terms) == ["to_punycode"]


def test_the_stems_follow_the_index_and_an_empty_one_knows_nothing(index, tmp_path_factory):
    assert stem("parsing") in index.index_terms().stems and "urlparse" in index.index_terms().words
    assert unknown_terms("What does punycode do?", IndexTerms(frozenset(), frozenset())) == []
    grown = index_of(tmp_path_factory, {**DOCS, "idna.md": "# IDNA\n\nHost names are encoded as punycode."},
                     name="terms-grown")
    assert unknown_terms("Which function converts to punycode?", grown.index_terms()) == []


def test_common_words_are_berts_whole_words():
    words = common_words()
    assert 20_000 < len(words) < 30_522
    assert {"happens", "treat", "port"} <= words and not {"punycode", "syslog", "gzip"} & words
    terms = IndexTerms.from_tokens(["parses", "parsing", "3.11", "os.path", "path"])
    assert terms.stems == frozenset({"pars", "path"}) and "os.path" in terms.words


def test_a_misspelled_word_of_the_index_is_not_unknown_but_a_short_neighbour_is(index):
    terms = index.index_terms()
    # one edit from "splits" / "scheme" (a swap, a dropped letter): typos, not new subjects
    assert unknown_terms("Which argument spilts the URL, and what is its shceme?", terms) == []
    # under 5 letters one edit reaches too many other words ("gzip", "zip"): "hots" stays unknown
    assert unknown_terms("Does the netloc hold the hots name?", terms) == ["hots"]
    assert unknown_terms("Which argument converts to punycode?", terms) == ["punycode"]  # two edits from nothing
