"""``Session.fork`` in the SDK: SQLite and in-memory sessions, fork points, tool steps kept whole."""

from __future__ import annotations

import pytest

from loom.orchestrator.session import InMemorySession, SQLSession
from loom.runtime.errors import InvalidRequestError

ITEMS = [
    {"kind": "memory_snapshot", "turn": 0, "role": "user", "content": "m", "token_ids": [1]},
    {"kind": "user", "turn": 1, "role": "user", "content": "q1", "token_ids": [2]},
    {"kind": "assistant", "turn": 1, "role": "assistant", "content": "", "token_ids": [3],
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"kind": "tool_result", "turn": 1, "role": "tool", "content": "r", "token_ids": [4], "tool_call_id": "call_1"},
    {"kind": "tool_result", "turn": 1, "role": "tool", "content": "r", "token_ids": [4], "tool_call_id": "call_2"},
    {"kind": "assistant", "turn": 1, "role": "assistant", "content": "a1", "token_ids": [5]},
    {"kind": "compaction", "turn": 1, "hide": [[1, 2]], "summary": None, "after_turn": True},
    {"kind": "user", "turn": 2, "role": "user", "content": "q2", "token_ids": [6]},
    {"kind": "assistant", "turn": 2, "role": "assistant", "content": "a2", "token_ids": [7]},
]


@pytest.fixture(params=["memory", "sql"])
def session(request, tmp_path):
    s = InMemorySession("p") if request.param == "memory" else SQLSession("p", f"sqlite:///{tmp_path}/s.db")
    s.add_items(ITEMS)
    return s


def test_fork_after_a_turn_keeps_its_items_and_markers_and_leaves_the_parent(session) -> None:
    child = session.fork("c", turn=1)
    assert child.get_items() == ITEMS[:7]  # turn 1 with its after-turn compaction marker
    child.add_items([{"kind": "user", "turn": 2, "role": "user", "content": "other", "token_ids": [9]}])
    assert session.get_items() == ITEMS and child.session_id == "c"


def test_fork_at_an_item_count_and_default_copies_all(session) -> None:
    assert session.fork("c1", at=2).get_items() == ITEMS[:2]
    assert session.fork("c4", at=5).get_items() == ITEMS[:5]  # after the step's last result
    assert session.fork("c2").get_items() == ITEMS
    assert session.fork("c3", turn=0).get_items() == ITEMS[:1]


@pytest.mark.parametrize("at", [3, 4])
def test_fork_inside_a_tool_step_is_refused_naming_at(session, at) -> None:
    with pytest.raises(InvalidRequestError, match="tool step") as e:
        session.fork("c", at=at)
    assert e.value.param == "at"


@pytest.mark.parametrize("kw, param", [({"at": 99}, "at"), ({"turn": 5}, "turn"), ({"at": 1, "turn": 1}, "at"),
                                       ({"turn": -1}, "turn")])
def test_bad_fork_points_name_the_field(session, kw, param) -> None:
    with pytest.raises(InvalidRequestError) as e:
        session.fork("c", **kw)
    assert e.value.param == param


def test_sql_fork_into_a_session_with_items_is_refused(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    parent, other = SQLSession("p", url), SQLSession("o", url)
    parent.add_items(ITEMS)
    other.add_items(ITEMS[:1])
    with pytest.raises(InvalidRequestError, match="already has items"):
        parent.fork("o")
    assert other.get_items() == ITEMS[:1]
