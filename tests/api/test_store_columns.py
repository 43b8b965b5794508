"""A database written by an older Loom opens: ``Store`` adds the nullable columns added since, old rows read
them as NULL, and a second start on the same file adds nothing (real SQLite)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import inspect

from loom.api.store import Store, Turn, add_missing_columns


def test_an_older_database_gains_the_finish_reason_column_and_keeps_its_turns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = Store(url)
    session = store.create_session("alice", {})
    with store.tx() as s:
        s.add(Turn(session_id=session.id, index=0, user_message="hi", state="done", answer="hello"))
    store.close()
    with sqlite3.connect(tmp_path / "old.db") as conn:  # as a Loom before the column wrote it
        conn.execute("ALTER TABLE api_turns DROP COLUMN finish_reason")

    again = Store(url)
    assert "finish_reason" in {c["name"] for c in inspect(again.engine).get_columns("api_turns")}
    (turn,) = again.turns(session.id)
    assert (turn.answer, turn.finish_reason) == ("hello", None)
    assert add_missing_columns(again.engine) == []  # the next start finds nothing to add
    again.close()
