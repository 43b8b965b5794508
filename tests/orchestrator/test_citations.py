"""loom.orchestrator.citations: parsing bracket citations, checking them against retrieved hits, attribution by overlap."""

from dataclasses import dataclass

from loom.orchestrator.citations import (
    attribute,
    check_answer,
    citation_label,
    content_words,
    format_source,
    match_citation,
    parse_citations,
)


@dataclass
class Hit:
    document: str
    section: str
    text: str
    title: str = ""


JOIN = Hit("stdlib:module/os.path", "os.path.join",
           "os.path.join(a, *p)\n\nJoin two or more pathname components, inserting '/' as needed.\n"
           "If any component is an absolute path, all previous path components will be discarded.", "os.path")
STAT = Hit("stdlib:module/pathlib", "pathlib.Path.stat",
           "pathlib.Path.stat(self, *, follow_symlinks=True)\n\nReturn the result of the stat() system call "
           "on this path, like os.stat() does.", "pathlib")
WITH = Hit("stdlib:topic/with", "", 'The "with" statement is used to wrap the execution of a block with '
           "methods defined by a context manager.", 'The "with" statement')
COUNTER = Hit("stdlib:module/collections", "collections.Counter.copy", "Return a shallow copy.")
JOIN_ANSWER = ("os.path.join joins two or more pathname components, inserting '/' as needed; an absolute "
               "component discards the previous ones.")


def test_labels_drop_the_module_prefix_and_fall_back_to_the_document_id():
    assert citation_label(JOIN) == "os.path — join"
    assert citation_label(WITH) == 'The "with" statement'
    assert citation_label(COUNTER) == "collections — Counter.copy"  # no title: the id's last part
    assert citation_label(Hit("stdlib:module/json", "json", "doc", "json")) == "json"
    files = Hit("/docs/tutorial/request-files.md", "Request Files > Multiple File Uploads", "...", "Request Files")
    assert citation_label(files) == "Request Files — Multiple File Uploads"  # the title is not repeated


def test_parse_finds_bracket_citations_in_order_without_duplicates():
    text = "It joins paths [os.path — join]. See also [pathlib — Path.stat; os.path — join] and [os.path — join]."
    assert parse_citations(text) == ["os.path — join", "pathlib — Path.stat"]


def test_parse_skips_code_links_and_numbers():
    text = ("x = d[key] + [1, 2, 3] + ['a', 'b'] + [x for x in y] + s[1:3]; "
            "see [the docs](https://docs.python.org) or [42] or [os.path.join]")
    assert parse_citations(text) == ["os.path.join"]


def test_citations_match_any_spelling_of_a_retrieved_label():
    hits = [JOIN, STAT]
    for spelling in ("os.path — join", "os.path - join", "os.path.join", "OS.PATH – JOIN",
                     "stdlib:module/os.path - os.path.join", "os.path join"):
        assert match_citation(spelling, hits) is JOIN, spelling
    assert match_citation("pathlib", hits) is STAT  # a document alone: its best hit
    assert match_citation("json — loads", hits) is None
    assert match_citation("os.path — join", [STAT]) is None  # not retrieved this turn


def test_check_verifies_cited_sources_and_keeps_unverified_citations_apart():
    check = check_answer(JOIN_ANSWER + " [os.path — join] [json — loads]", [STAT, JOIN])
    assert [(s.label, s.cited) for s in check.sources] == [("os.path — join", True)]
    assert check.sources[0].hit is JOIN
    assert check.unverified == ["json — loads"]
    assert format_source(check.sources[0]) == "✓ [os.path — join] cited"


def test_uncited_answer_is_attributed_to_the_hit_it_overlaps():
    check = check_answer(JOIN_ANSWER, [STAT, JOIN])
    assert [(s.label, s.cited) for s in check.sources] == [("os.path — join", False)]
    assert check.unverified == []
    words = content_words(JOIN_ANSWER)
    shared = words & content_words(JOIN.text)
    assert check.sources[0].overlap == len(shared) / len(words)
    assert format_source(check.sources[0]) == f"≈ [os.path — join] {len(shared) / len(words):.0%} word overlap"


def test_a_citation_that_checks_out_nothing_falls_back_to_attribution():
    check = check_answer(JOIN_ANSWER + " [json — loads]", [JOIN])
    assert [(s.label, s.cited) for s in check.sources] == [("os.path — join", False)]
    assert check.unverified == ["json — loads"]


def test_answers_unrelated_to_every_hit_get_no_source():
    assert attribute("The answer is 8760 hours.", [JOIN, STAT, WITH]) == []
    assert check_answer("", [JOIN]).sources == []
    assert check_answer(JOIN_ANSWER, []).sources == []


def test_two_chunks_of_one_section_are_one_source_and_weak_hits_are_left_out():
    first = Hit(JOIN.document, JOIN.section, JOIN.text[:90], "os.path")
    second = Hit(JOIN.document, JOIN.section, JOIN.text[90:], "os.path")
    sources = attribute(JOIN_ANSWER, [first, STAT, second])
    assert [s.label for s in sources] == ["os.path — join"]
    assert sources[0].hit is first


def test_content_words_drop_stop_words_and_plural_s():
    assert content_words("The components are joined, as needed: os.path") == {
        "component", "joined", "needed", "os", "path"}


def test_labels_with_quotes_and_commas_are_cited_whole():
    seq = Hit("stdlib:topic/typesseq", 'Sequence Types — "list", "tuple", "range" > Common Sequence Operations',
              "Most sequence types support the operations in the table below.", "Sequence Types")
    label = citation_label(seq)
    check = check_answer(f"Most sequence types support these operations [{label}].", [WITH, seq])
    assert [(s.label, s.cited) for s in check.sources] == [(label, True)] and check.unverified == []
    assert parse_citations('See [The "with" statement].') == ['The "with" statement']


@dataclass
class EntryHit:
    document: str
    section: str
    text: str
    title: str
    metadata: dict


CHOICES = EntryHit("/docs/library/random.rst", "random — Generate pseudo-random numbers > Functions for sequences",
                   "random.choices(population, weights=None, *, cum_weights=None, k=1)\n\nReturn a k sized list "
                   "of elements chosen from the population with replacement.", "random — Generate pseudo-random numbers",
                   {"object": "random.choices", "objtype": "function", "module": "random"})


def test_an_api_entry_is_labelled_module_then_name_and_cited_by_any_spelling():
    assert citation_label(CHOICES) == "random — choices"
    merge = EntryHit("/doc/orm/session_api.rst", "Session API", "sqlalchemy.orm.Session.merge(instance)", "Session API",
                     {"object": "sqlalchemy.orm.Session.merge", "module": "sqlalchemy.orm"})
    assert citation_label(merge) == "sqlalchemy.orm — Session.merge"
    for cited in ("random — choices", "random.choices", "random - choices"):
        assert match_citation(cited, [merge, CHOICES]) is CHOICES


def test_attribution_names_the_best_section_only_and_a_tie_goes_to_the_higher_ranked():
    near = Hit(STAT.document, STAT.section, JOIN.text[: len(JOIN.text) // 2], "os.path")  # a weaker match
    assert [s.label for s in attribute(JOIN_ANSWER, [near, JOIN])] == ["os.path — join"]
    twin = Hit(WITH.document, WITH.section, JOIN.text, "with")  # the same words under another label
    assert [s.label for s in attribute(JOIN_ANSWER, [JOIN, twin])] == ["os.path — join"]
    assert [s.label for s in attribute(JOIN_ANSWER, [twin, JOIN])] == [citation_label(twin)]
    assert {s.label for s in attribute(JOIN_ANSWER, [JOIN, twin], max_sources=None)} == {
        "os.path — join", citation_label(twin)}

