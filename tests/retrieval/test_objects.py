"""Identifier-aware search (loom.retrieval.objects) and multi-query fusion (Retriever.search_many)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.retrieval.bm25 import query_identifiers
from loom.retrieval.objects import ObjectIndex
from loom.retrieval.retriever import Retriever


def test_query_identifiers_finds_dotted_snake_camel_and_call_forms() -> None:
    assert query_identifiers("json.dumps indent") == ["json.dumps"]
    assert query_identifiers("how does move_to_end() work on an OrderedDict?") == ["move_to_end", "OrderedDict"]
    assert query_identifiers("how do I join two paths") == []


def test_object_index_matches_exact_then_dotted_suffix_on_component_boundaries() -> None:
    idx = ObjectIndex([(1, 0, "sqlalchemy.orm.Session.merge"), (2, 3, "sqlalchemy.ext.asyncio.AsyncSession.merge"),
                       (3, 5, "sqlalchemy.orm.Session.merge"), (4, 1, "Session.merge")])
    assert idx.entries("Session.merge") == ["Session.merge", "sqlalchemy.orm.Session.merge"]
    assert idx.defining_chunks("what does Session.merge() do") == [4, 1]  # first chunk of each entry
    assert idx.defining_chunks("Session.merge", allowed={1}) == [1]
    assert idx.entries("merge_all") == []


@pytest.fixture(scope="module")
def stdlib_index(tmp_path_factory, embedder) -> Retriever:
    r = Retriever(tmp_path_factory.mktemp("objects"), embedder=embedder)
    r.ingest(["stdlib:module/json", "stdlib:module/os.path", "stdlib:module/shlex", "stdlib:module/tarfile",
              "stdlib:module/zipfile"], show_progress=False)
    return r


@pytest.mark.parametrize("query, entry", [
    ("json.dumps indent", "json.dumps"),
    ("os.path.join", "os.path.join"),
    ("shlex.join quoting", "shlex.join"),
    ("TarFile.extractall", "tarfile.TarFile.extractall"),
])
def test_query_naming_an_api_finds_its_defining_entry_first(stdlib_index: Retriever, query: str,
                                                            entry: str) -> None:
    top = stdlib_index.search(query, k=3)[0]
    assert top.metadata["object"] == entry
    assert top.text.startswith(entry)  # the entry's first chunk: the signature


def test_pure_modes_are_not_reordered_by_object_names(stdlib_index: Retriever) -> None:
    # queries whose pure rankings do not start with the named entry (hybrid puts it first: above)
    assert stdlib_index.search("json.dumps indent", k=3, mode="bm25")[0].metadata.get("object") != "json.dumps"
    dense = stdlib_index.search("TarFile.extractall", k=3, mode="dense")[0]
    assert dense.metadata.get("object") != "tarfile.TarFile.extractall"


def test_object_index_follows_deletes(tmp_path: Path, embedder) -> None:
    r = Retriever(tmp_path / "idx", embedder=embedder)
    r.ingest(["stdlib:module/json"], show_progress=False)
    assert r.search("json.loads", k=1)[0].metadata["object"] == "json.loads"
    r.delete_document("stdlib:module/json")
    assert r.search("json.loads", k=1) == []


def test_search_many_keeps_what_each_phrasing_finds(stdlib_index: Retriever) -> None:
    # A rewrite that copied the previous question must not lose what the user typed.
    rewrite, typed = "How do I extract all members of a zip file?", "and for tar files?"
    fused = [h.document for h in stdlib_index.search_many([rewrite, typed], k=6)]
    assert "stdlib:module/tarfile" in fused and "stdlib:module/zipfile" in fused
    assert stdlib_index.search_many([typed], k=3) == stdlib_index.search(typed, k=3)


def test_search_many_rejects_no_queries(stdlib_index: Retriever) -> None:
    with pytest.raises(ValueError, match="queries"):
        stdlib_index.search_many(["", "  "])
