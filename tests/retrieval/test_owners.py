"""A document's owner (``metadata.owner``) is a column of the chunk store: search filters on it, a document of one
owner never replaces another's or a shared one, and an index written before the column gets it on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from loom.retrieval import Document, Retriever, Section
from loom.runtime.errors import ConflictError


def _doc(doc_id: str, text: str, owner: str | None = None) -> Document:
    return Document(id=doc_id, title="Ferry", sections=(Section("Timetable", text),),
                    metadata={} if owner is None else {"owner": owner})


def test_a_document_is_replaced_only_by_a_document_of_the_same_owner(tmp_path: Path, embedder) -> None:
    index = Retriever(tmp_path / "index", embedder=embedder)
    index.add_documents([_doc("alice/ferry.md", "The ferry leaves at 07:15."),  # shared: `loom ingest` of alice/
                         _doc("alice/diary", "Mondays: the 07:15.", owner="alice")])
    for doc in (_doc("alice/ferry.md", "The ferry is cancelled.", owner="alice"),  # an owner over a shared one
                _doc("alice/diary", "Bob was here.", owner="bob"),              # another owner over alice's
                _doc("alice/diary", "Nobody's now.")):                          # shared over an owner's
        with pytest.raises(ConflictError, match="belongs to another owner"):
            index.add_documents([doc])
    assert sorted(h.text for h in index.search("ferry 07:15 Mondays", k=5)) == [
        "Mondays: the 07:15.", "The ferry leaves at 07:15."]
    index.add_documents([_doc("alice/diary", "Tuesdays: the 19:40.", owner="alice")])  # the owner may
    assert [h.text for h in index.search("Tuesdays 19:40", k=5, filters={"owner": "alice"})] == ["Tuesdays: the 19:40."]
    with pytest.raises(ValueError, match="metadata.owner"):
        index.add_documents([Document(id="x", title="", sections=(Section("", "text"),), metadata={"owner": 7})])


def test_an_index_from_before_the_owner_column_gets_it_filled_from_metadata(tmp_path: Path, embedder) -> None:
    index = Retriever(tmp_path / "index", embedder=embedder)
    index.add_documents([_doc("shared.md", "The ferry leaves at 07:15."),
                         _doc("alice/diary", "Mondays: the 07:15.", owner="alice")])
    alice_chunks = index.store.filter_faiss_ids({"owner": "alice"})
    db = sqlite3.connect(tmp_path / "index" / "chunks.sqlite")  # back to the schema before owner columns
    for table in ("documents", "chunks"):
        db.execute(f"DROP INDEX ix_{table}_owner")
        db.execute(f"ALTER TABLE {table} DROP COLUMN owner")
    db.commit()
    db.close()
    reopened = Retriever.open(tmp_path / "index", embedder=embedder)
    assert reopened.store.filter_faiss_ids({"owner": "alice"}) == alice_chunks and alice_chunks
    assert reopened.store.document_owners(["shared.md", "alice/diary"]) == {"shared.md": None, "alice/diary": "alice"}
    assert len(reopened.store.filter_faiss_ids({"owner": ["alice", None]})) == len(reopened)
    assert reopened.store.migrate() is False  # idempotent
