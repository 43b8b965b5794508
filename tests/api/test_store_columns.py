"""A database written by an older Loom opens: ``Store`` adds the nullable columns added since, old rows read
them as NULL, and a second start on the same file adds nothing (real SQLite)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import inspect

from loom.api.store import Store, Turn, add_missing_columns


def test_an_older_database_gains_the_newer_turn_columns_and_keeps_its_turns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = Store(url)
    session = store.create_session("alice", {})
    with store.tx() as s:
        s.add(Turn(session_id=session.id, index=0, user_message="hi", state="done", answer="hello"))
    store.close()
    with sqlite3.connect(tmp_path / "old.db") as conn:  # as a Loom before the column wrote it
        conn.execute("ALTER TABLE api_turns DROP COLUMN finish_reason")
        conn.execute("DROP INDEX ix_api_turns_idempotency_key")
        conn.execute("ALTER TABLE api_turns DROP COLUMN idempotency_key")

    again = Store(url)
    assert {"finish_reason", "idempotency_key"} <= {c["name"] for c in inspect(again.engine).get_columns("api_turns")}
    (turn,) = again.turns(session.id)
    assert (turn.answer, turn.finish_reason, turn.idempotency_key) == ("hello", None, None)
    assert again.settled_turn(session.id, "k") is None
    assert add_missing_columns(again.engine) == []  # the next start finds nothing to add
    again.close()
