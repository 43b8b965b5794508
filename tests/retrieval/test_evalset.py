"""Known-item sets built from an index: stdlib sets, documentation-object sets, section sets."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from loom.retrieval import Document, Retriever, Section
from loom.retrieval.evalset import Query, build_queries, evaluate, score
from loom.retrieval.store import ChunkRow


def _entry(obj: str, objtype: str, sig: str, body: str) -> Section:
    module = obj.rsplit(".", 2 if objtype == "method" else 1)[0]
    return Section(obj, f"{obj}{sig}\n\n{body}",
                   {"object": obj, "objtype": objtype, "module": module})


SPHINX = Document("/docs/orm/session_api.rst", "Session API", (
    Section("Session API", "The Session is the ORM's handle to the database."),
    _entry("sqlalchemy.orm.Session.merge", "method", "(instance, *, load=True)",
           "Copy the state of a given instance into a corresponding instance within this "
           "Session. More follows here."),
    _entry("sqlalchemy.orm.scoped_session.merge", "method", "(instance, *, load=True)",
           "Copy the state of a given instance into a corresponding instance within this "
           "Session. Proxied for the Session class."),
    _entry("sqlalchemy.orm.Session.expunge_all", "method", "()",
           "Remove all object instances from this Session, expunge_all being cheap."),
    _entry("sqlalchemy.orm.Session.close", "method", "()", "Close it."),
    _entry("sqlalchemy.orm.make_transient", "function", "(instance)",
           "Alter the state of the given instance so that it is transient."),
), metadata={"format": "rst"})

MARKDOWN = Document("/docs/tutorial/query-params.md", "Query Parameters", (
    Section("Query Parameters", "When you declare other function parameters that are not "
            "part of the path parameters, they are automatically interpreted as query "
            "parameters."),
    Section("Query Parameters > Defaults", "```Python\n{!../docs_src/tutorial001.py!}\n```\n\n"
            "As query parameters are not a fixed part of a path, they can be optional and "
            "can have default values."),
    Section("Query Parameters > Recap", "- short list item"),
), metadata={"format": "md"})

STDLIB = (
    Document("stdlib:topic/assert", "The assert statement", (
        Section("The assert statement", "Assert statements are a convenient way to insert "
                "debugging assertions into a program."),)),
    Document("stdlib:module/os.path", "os.path", (
        Section("os.path", "Common operations on Posix pathnames."),
        Section("os.path.join", "os.path.join(a, *p)\n\nJoin two or more pathname components, "
                "inserting '/' as needed.", {"object": "os.path.join"}),
        Section("os.path.splitext", "os.path.splitext(p)\n\nSplit the extension from a "
                "pathname. Extension is everything from the last dot to the end.",
                {"object": "os.path.splitext"}),
    )),
)


@pytest.fixture()
def index(tmp_path: Path, embedder) -> Retriever:
    r = Retriever.open(tmp_path / "idx", embedder=embedder)
    r.add_documents([SPHINX, MARKDOWN, *STDLIB], show_progress=False)
    return r


def _chunks(r: Retriever, object: str | None = None, section: str | None = None
            ) -> frozenset[str]:
    """Ids of the stored chunks of one object or one section."""
    with r.store.session() as s:
        rows = s.execute(select(ChunkRow.chunk_id, ChunkRow.section, ChunkRow.meta)).all()
    return frozenset(c for c, sec, meta in rows
                     if (object is None or (meta or {}).get("object") == object)
                     and (section is None or sec == section))


def _by_kind(queries: list[Query]) -> dict[str, list[Query]]:
    out: dict[str, list[Query]] = {}
    for q in queries:
        out.setdefault(q.kind, []).append(q)
    return out


def test_object_api_queries_are_qualified_names_with_that_objects_chunks(index) -> None:
    api = {q.text: q.relevant for q in build_queries(index.store)
           if q.kind == "api" and not q.text.startswith("os.")}
    assert sorted(api) == ["sqlalchemy.orm.Session.close", "sqlalchemy.orm.Session.expunge_all",
                           "sqlalchemy.orm.Session.merge", "sqlalchemy.orm.make_transient",
                           "sqlalchemy.orm.scoped_session.merge"]
    assert api["sqlalchemy.orm.Session.merge"] == _chunks(index,
                                                          object="sqlalchemy.orm.Session.merge")


def test_describe_queries_cut_the_name_and_drop_short_descriptions(index) -> None:
    describe = {q.text: q.relevant for q in build_queries(index.store)
                if q.kind == "describe" and not q.relevant & _chunks(index, section="os.path.join")
                and not q.relevant & _chunks(index, section="os.path.splitext")}
    assert sorted(describe) == [
        "Alter the state of the given instance so that it is transient.",
        "Copy the state of a given instance into a corresponding instance within this Session.",
        "Remove all object instances from this Session, being cheap.",
    ]


def test_describe_query_shared_by_two_objects_counts_both_as_relevant(index) -> None:
    q = next(q for q in build_queries(index.store) if q.text.startswith("Copy the state"))
    assert q.relevant == (_chunks(index, object="sqlalchemy.orm.Session.merge")
                          | _chunks(index, object="sqlalchemy.orm.scoped_session.merge"))


def test_section_queries_skip_code_and_drop_the_heading_words(index) -> None:
    sections = {q.text: q.relevant for q in build_queries(index.store) if q.kind == "section"}
    assert sorted(sections) == [
        "As query parameters are not a fixed part of a path, they can be optional and can "
        "have default values.",  # only the section's own heading ("Defaults") is dropped
        "The is the ORM's handle to the database.",
        "When you declare other function that are not part of the path, they are "
        "automatically interpreted as.",
    ]
    defaults = next(v for k, v in sections.items() if k.startswith("As query"))
    assert defaults == _chunks(index, section="Query Parameters > Defaults")


def test_stdlib_sets_keep_their_own_rules_though_stdlib_entries_carry_objects(index) -> None:
    kinds = _by_kind(build_queries(index.store))
    assert [q.text for q in kinds["topic"]] == ["assert"]
    # a dotted module's own section counts as an api entry, as it always did
    stdlib_api = sorted(q.text for q in kinds["api"] if q.text.startswith("os."))
    assert stdlib_api == ["os.path", "os.path.join", "os.path.splitext"]
    stdlib_describe = sorted(q.text for q in kinds["describe"] if "pathname" in q.text)
    assert stdlib_describe == [  # the name test is case-sensitive, as it always was
        "Join two or more pathname components, inserting '/' as needed.",
        "Split the extension from a pathname."]


def test_sampling_is_seeded_and_capped_per_set(index) -> None:
    a = build_queries(index.store, per_set=2, seed=3)
    assert a == build_queries(index.store, per_set=2, seed=3)
    counts = {k: len(v) for k, v in _by_kind(a).items()}
    # stdlib api/describe (2 each) + object api/describe (2 each): each builder caps its own
    assert counts == {"topic": 1, "api": 4, "describe": 4, "section": 2}


def test_evaluate_finds_every_api_entry_first_in_hybrid_mode(index) -> None:
    queries = [q for q in build_queries(index.store) if q.kind == "api"]
    got = evaluate(index, queries, modes=("hybrid",))
    assert got["api"]["hybrid"] == {"recall@5": 1.0, "mrr@10": 1.0, "n": 8}


def test_score_is_hit_at_5_and_reciprocal_rank_at_10() -> None:
    rel = frozenset({"c"})
    assert score(["a", "b", "c"], rel) == (1.0, 1 / 3)
    assert score(["x"] * 6 + ["c"], rel) == (0.0, 1 / 7)
    assert score(["x"] * 10 + ["c"], rel) == (0.0, 0.0)


def test_synthetic_copies_of_one_word_chunks_get_distinct_ids(tmp_path: Path, embedder) -> None:
    # bench.build_synthetic (tested here, beside the sets the bench measures): autodoc
    # entries are bare names, and two one-word siblings could copy into one chunk id
    from loom.retrieval.bench import build_synthetic

    names = ("alpha", "beta", "gamma", "delta")
    doc = Document("/docs/api.rst", "API", tuple(
        Section("API", f"pkg.{n}", {"object": f"pkg.{n}"}) for n in names))
    real = Retriever.open(tmp_path / "real", embedder=embedder)
    real.add_documents([doc], show_progress=False)
    syn = build_synthetic(real, tmp_path / "syn", 40, hnsw_threshold=1000)
    assert len(syn) == 40 and syn.vector_index.ntotal == 40
