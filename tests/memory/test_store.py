"""Database setup: SQLite pragmas, URLs, portable DDL, and the embedder protocol."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from loom.memory import EventType, LongTermMemory
from loom.memory.db import make_engine, normalize_url
from loom.memory.models import MemoryRow, NamespaceRow


def test_sqlite_connections_use_wal_normal_sync_and_busy_timeout(tmp_path):
    engine = make_engine(tmp_path / "sub" / "memory.db")  # a bare path, parent created
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    engine.dispose()


def test_normalize_url():
    assert normalize_url("/tmp/m.db") == "sqlite:////tmp/m.db"
    assert normalize_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    with pytest.raises(ValueError, match="url"):
        normalize_url(" ")


def test_tables_compile_for_postgres():
    ddl = str(CreateTable(MemoryRow.__table__).compile(dialect=postgresql.dialect()))
    assert "embedding BYTEA NOT NULL" in ddl
    assert "created_at DOUBLE PRECISION NOT NULL" in ddl
    assert "FOREIGN KEY(superseded_by_id) REFERENCES memories (id) ON DELETE SET NULL" in ddl
    namespaces = str(CreateTable(NamespaceRow.__table__).compile(dialect=postgresql.dialect()))
    assert "PRIMARY KEY (owner, namespace)" in namespaces


def test_embeddings_are_stored_as_float32_bytes(make_memory, embedder):
    mem = make_memory()
    event = mem.add("User lives in Paris", "u1")[0]
    with mem.engine.connect() as conn:
        blob = conn.execute(text("SELECT embedding FROM memories WHERE id = :i"), {"i": event.id}).scalar()
    stored = np.frombuffer(blob, dtype=np.float32)
    assert stored.shape == (384,)
    np.testing.assert_allclose(stored, embedder.encode(["User lives in Paris"])[0], atol=1e-6)


def test_in_memory_sqlite_url_works_across_threads(embedder):
    import threading

    mem = LongTermMemory("sqlite://", embedder=embedder)
    out = []
    t = threading.Thread(target=lambda: out.append(mem.add("User lives in Paris", "u1")))
    t.start()
    t.join(30)
    assert out[0][0].event is EventType.ADD
    assert [m.text for m in mem.list("u1")] == ["User lives in Paris"]
    mem.close()


class WordCountEmbedder:
    """Any object with ``encode`` is an embedder (here: a 3-dim bag of chosen words, for the protocol test)."""

    WORDS = ("paris", "cello", "tea")

    def encode(self, texts):
        vecs = np.array([[t.lower().count(w) + 1e-3 for w in self.WORDS] for t in texts], dtype=np.float32)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def test_any_object_with_encode_plugs_in(tmp_path):
    mem = LongTermMemory(tmp_path / "m.db", embedder=WordCountEmbedder())
    mem.add("User lives in Paris", "u1")
    mem.add("User plays the cello", "u1")
    assert mem.search("cello lessons", "u1", k=1)[0].text == "User plays the cello"
    mem.close()


def test_reopening_with_an_embedder_of_another_dimension_is_a_clear_error(tmp_path, embedder):
    path = tmp_path / "m.db"
    LongTermMemory(path, embedder=embedder).add("User lives in Paris", "u1")
    other = LongTermMemory(path, embedder=WordCountEmbedder())
    with pytest.raises(ValueError, match="embedder"):
        other.add("User plays the cello", "u1")
    with pytest.raises(ValueError, match="embedder"):
        other.search("cello", "u1")
    assert len(other.list("u1")) == 1


def test_embedder_without_encode_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="embedder"):
        LongTermMemory(tmp_path / "m.db", embedder=object())
