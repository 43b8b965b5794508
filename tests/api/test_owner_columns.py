"""Owners are columns of their own, on a real ``loom serve``: a server database written before them (memory
namespaces stored as ``owner::namespace``) is split on start and each owner keeps exactly their memories, and an
owner's document id that would replace an operator's shared document (``loom ingest`` keeps a path such as
``alice/notes.md`` as its id, which is how alice's ``notes.md`` is keyed) is a 409 that changes nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ENGINE_FLAGS
from tests.api.server import Server, new_key

# The memory tables as a server before owner columns wrote them, with two owners' joined namespaces and one
# library user's (no owner) whose name merely contains "::" after something that is no owner name.
OLD_MEMORY_TABLES = """
CREATE TABLE memories (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace VARCHAR(255) NOT NULL, text TEXT NOT NULL,
    slot VARCHAR(255), embedding BLOB NOT NULL, active BOOLEAN NOT NULL, created_at FLOAT NOT NULL,
    updated_at FLOAT NOT NULL, last_used_at FLOAT NOT NULL, use_count INTEGER NOT NULL,
    source_session_id VARCHAR(255), source_turn INTEGER, source_kind VARCHAR(32), source_detail VARCHAR(255),
    quarantine VARCHAR(255), supersedes_id INTEGER, superseded_by_id INTEGER);
CREATE INDEX ix_memories_namespace_active ON memories (namespace, active);
CREATE TABLE memory_namespaces (namespace VARCHAR(255) PRIMARY KEY, revision INTEGER NOT NULL);
INSERT INTO memory_namespaces VALUES ('alice::notes', 7), ('bob::notes', 3), ('::odd', 1);
"""
OLD_ROWS = [("alice::notes", "User lives in Paris"), ("bob::notes", "User plays the cello"),
            ("::odd", "User keeps bees")]


def _write_old_memories(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(OLD_MEMORY_TABLES)
    for ns, text in OLD_ROWS:  # a zero vector of MiniLM's 384 dimensions: listing never reads it
        db.execute("INSERT INTO memories (namespace, text, embedding, active, created_at, updated_at, last_used_at, "
                   "use_count, source_kind) VALUES (?, ?, ?, 1, 0, 0, 0, 0, 'user')", (ns, text, bytes(384 * 4)))
    db.commit()
    db.close()


@pytest.fixture(scope="module")
def served(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str], Path]]:
    from loom.retrieval import Document, Retriever, Section

    work = tmp_path_factory.mktemp("owner-columns")
    db_path = work / "loom.db"
    db = f"sqlite:///{db_path}"
    keys = {o: new_key(db, o) for o in ("alice", "bob")}
    _write_old_memories(db_path)
    Retriever.open(work / "index").add_documents(  # the operator's, shared: as `loom ingest alice/notes.md` keys it
        [Document(id="alice/notes.md", title="Ferry", sections=(Section("Timetable", "The ferry leaves at 07:15."),))])
    srv = Server(checkpoint, db, work, "--index", str(work / "index"), *ENGINE_FLAGS).start()
    yield srv, keys, db_path
    srv.stop()


def _client(served: tuple[Server, dict[str, str], Path], owner: str) -> httpx.Client:
    srv, keys, _ = served
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {keys[owner]}"}, timeout=120)


def _texts(client: httpx.Client, namespace: str) -> list[str]:
    reply = client.get("/v1/memories", params={"namespace": namespace})
    assert reply.status_code == 200, reply.text
    return [m["text"] for m in reply.json()["data"]]


def test_a_database_from_before_owner_columns_is_split_and_each_owner_keeps_their_memories(served):
    with _client(served, "alice") as alice, _client(served, "bob") as bob:
        assert _texts(alice, "notes") == ["User lives in Paris"]
        assert _texts(bob, "notes") == ["User plays the cello"]
        assert _texts(alice, "alice::notes") == [] and _texts(bob, "odd") == []
        added = alice.post("/v1/memories", json={"namespace": "notes", "text": "User drinks green tea"})
        assert added.status_code == 200 and added.json()["data"][0]["event"] == "ADD"
        assert _texts(alice, "notes") == ["User lives in Paris", "User drinks green tea"]
    db = sqlite3.connect(served[2])
    rows = db.execute("SELECT owner, namespace, revision FROM memory_namespaces ORDER BY owner, namespace").fetchall()
    db.close()
    assert rows == [("", "::odd", 1), ("alice", "notes", 8), ("bob", "notes", 3)]  # revisions kept, then counted on


def test_an_owners_document_id_that_would_replace_a_shared_document_is_a_409_that_changes_nothing(served):
    with _client(served, "alice") as alice, _client(served, "bob") as bob:
        reply = alice.post("/v1/documents", json={"id": "notes.md", "text": "The ferry is cancelled."})
        assert reply.status_code == 409, reply.text
        error = reply.json()["error"]
        assert error["code"] == "conflict" and error["param"] == "id"
        assert "'notes.md'" in error["message"] and "alice/" not in error["message"]
        hits = bob.get("/v1/search", params={"q": "When does the ferry leave?", "k": 3}).json()["data"]
        assert [h["text"] for h in hits] == ["The ferry leaves at 07:15."]
        assert alice.delete("/v1/documents/notes.md").status_code == 404  # still nobody's
        assert alice.post("/v1/documents", json={"id": "notes", "text": "The ferry is cancelled."}).status_code == 200
