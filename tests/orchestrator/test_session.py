"""Session protocol: in-memory and SQLAlchemy (real SQLite file) implementations."""

from __future__ import annotations

import pytest

from loom.orchestrator.session import InMemorySession, Session, SQLSession

ITEMS = [{"kind": "user", "turn": 1, "role": "user", "content": "hi", "token_ids": [1, 2, 3]},
         {"kind": "assistant", "turn": 1, "role": "assistant", "content": "yo", "token_ids": [4, 5]}]


@pytest.fixture(params=["memory", "sql"])
def session(request, tmp_path) -> Session:
    if request.param == "memory":
        return InMemorySession()
    return SQLSession("s1", url=f"sqlite:///{tmp_path}/sessions.db")


def test_items_round_trip_in_order(session: Session) -> None:
    assert isinstance(session, Session)
    session.add_items(ITEMS)
    session.add_items([{"kind": "user", "turn": 2, "role": "user", "content": "again", "token_ids": []}])
    got = session.get_items()
    assert got[:2] == ITEMS and got[2]["content"] == "again"
    assert session.get_items(limit=1) == got[-1:]
    assert session.get_items(limit=0) == []


def test_pop_and_clear(session: Session) -> None:
    session.add_items(ITEMS)
    assert session.pop_item() == ITEMS[1]
    assert session.get_items() == ITEMS[:1]
    session.clear()
    assert session.get_items() == [] and session.pop_item() is None


def test_unserialisable_item_is_rejected_and_nothing_is_written(session: Session) -> None:
    session.add_items(ITEMS[:1])
    with pytest.raises(TypeError):
        session.add_items([ITEMS[1], {"bad": object()}])
    assert session.get_items() == ITEMS[:1]


def test_sql_sessions_persist_and_are_isolated(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    a, b = SQLSession("a", url=url), SQLSession("b", url=url)
    a.add_items(ITEMS)
    b.add_items(ITEMS[:1])
    b.clear()
    assert SQLSession("a", url=url).get_items() == ITEMS
    assert SQLSession("b", url=url).get_items() == []


def test_sql_session_id_is_validated(tmp_path) -> None:
    with pytest.raises(ValueError, match="session_id"):
        SQLSession("", url=f"sqlite:///{tmp_path}/s.db")
