"""``LoomCheckpointSaver``: LangGraph's own conformance suite passes on SQLite (and on
PostgreSQL when ``LOOM_POSTGRES_TEST_URL`` names one), and real graphs keep their state
across saver instances, processes' worth of restarts and failures, in Loom's database."""

from __future__ import annotations

import operator
import os
import uuid
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from sqlalchemy import inspect

from loom.api.langgraph import LoomCheckpointSaver
from loom.api.store import Store

URLS = ["sqlite"] + (["postgres"] if os.environ.get("LOOM_POSTGRES_TEST_URL") else [])


def _url(kind: str, tmp_path: Path) -> str:
    return os.environ["LOOM_POSTGRES_TEST_URL"] if kind == "postgres" else f"sqlite:///{tmp_path / 'loom.db'}"


@pytest.mark.parametrize("kind", URLS)
async def test_langgraph_conformance_suite_passes_every_capability_it_detects(kind: str, tmp_path: Path) -> None:
    conformance = pytest.importorskip("langgraph.checkpoint.conformance",
                                      reason="pip install langgraph-checkpoint-conformance (the dev extra)")

    @conformance.checkpointer_test(name=f"LoomCheckpointSaver[{kind}]")
    async def factory():  # noqa: ANN202
        saver = LoomCheckpointSaver(_url(kind, tmp_path))
        yield saver
        saver.close()

    report = await conformance.validate(factory)
    failures = {cap: r.failures for cap, r in report.results.items() if r.passed is False}
    assert failures == {} and report.passed_all_base()
    assert {cap for cap, r in report.results.items() if r.passed} == {
        "put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread"}


def _chat_graph(saver: LoomCheckpointSaver):  # noqa: ANN202
    def reply(state: MessagesState) -> dict:
        return {"messages": [AIMessage(f"you said {len(state['messages'])} things")]}

    g = StateGraph(MessagesState)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g.compile(checkpointer=saver)


def test_tables_live_beside_the_session_tables_and_appear_on_first_use(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'loom.db'}")
    saver = LoomCheckpointSaver(store.engine)
    assert not any(t.startswith("langgraph_") for t in inspect(store.engine).get_table_names())
    _chat_graph(saver).invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}})
    tables = set(inspect(store.engine).get_table_names())
    assert {"api_sessions", "langgraph_checkpoints", "langgraph_checkpoint_blobs",
            "langgraph_checkpoint_writes"} <= tables


@pytest.mark.parametrize("kind", URLS)
def test_a_new_saver_on_the_same_url_restores_the_thread(kind: str, tmp_path: Path) -> None:
    url = _url(kind, tmp_path)
    config = {"configurable": {"thread_id": f"chat-{uuid.uuid4()}"}}
    _chat_graph(LoomCheckpointSaver(url)).invoke({"messages": [HumanMessage("first")]}, config)
    graph = _chat_graph(LoomCheckpointSaver(url))  # as after a restart: nothing in memory
    out = graph.invoke({"messages": [HumanMessage("second")]}, config)
    assert [m.content for m in out["messages"]] == ["first", "you said 1 things", "second", "you said 3 things"]
    history = list(graph.get_state_history(config))
    # input, loop step of each turn, newest first; each one's parent is the next
    assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]
    assert all(h.parent_config["configurable"]["checkpoint_id"] == p.config["configurable"]["checkpoint_id"]
               for h, p in zip(history, history[1:]))
    assert [m.content for m in graph.get_state(history[3].config).values["messages"]] == [
        "first", "you said 1 things"]


class _Fan(TypedDict):
    done: Annotated[list[str], operator.add]


@pytest.mark.parametrize("kind", URLS)
def test_pending_writes_of_a_failed_step_spare_the_finished_task_on_resume(kind: str, tmp_path: Path) -> None:
    """LangGraph keeps the writes of tasks that finished in a step where another failed; a new
    saver must hand them back so the resumed run reruns only the failed task."""
    url = _url(kind, tmp_path)
    calls = {"a": 0, "b": 0}

    def a(state: _Fan) -> dict:
        calls["a"] += 1
        return {"done": ["a"]}

    def b(state: _Fan) -> dict:
        calls["b"] += 1
        if calls["b"] == 1:
            raise RuntimeError("b failed once")
        return {"done": ["b"]}

    def build(saver: LoomCheckpointSaver):  # noqa: ANN202
        g = StateGraph(_Fan)
        g.add_node("a", a)
        g.add_node("b", b)
        g.add_edge(START, "a")
        g.add_edge(START, "b")
        return g.compile(checkpointer=saver)

    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    with pytest.raises(RuntimeError, match="b failed once"):
        build(LoomCheckpointSaver(url)).invoke({"done": []}, config)
    saver = LoomCheckpointSaver(url)
    latest = saver.get_tuple(config)
    assert [(w[1], w[2]) for w in latest.pending_writes if w[1] == "done"] == [("done", ["a"])]
    assert any(w[1] == "__error__" for w in latest.pending_writes)
    out = build(saver).invoke(None, config)
    assert sorted(out["done"]) == ["a", "b"] and calls == {"a": 1, "b": 2}


async def test_async_graph_and_saver_methods_match_the_sync_ones(tmp_path: Path) -> None:
    saver = LoomCheckpointSaver(f"sqlite:///{tmp_path / 'loom.db'}")
    config = {"configurable": {"thread_id": "async-1"}}
    out = await _chat_graph(saver).ainvoke({"messages": [HumanMessage("hi")]}, config)
    assert [m.content for m in out["messages"]] == ["hi", "you said 1 things"]
    listed = [t async for t in saver.alist(config)]
    assert [t.config for t in listed] == [t.config for t in saver.list(config)]
    assert (await saver.aget_tuple(config)).config == listed[0].config
    assert [t.config for t in saver.list(config, filter={"source": "input"})] == [listed[-1].config]
    assert [t.config for t in saver.list(config, before=listed[0].config, limit=1)] == [listed[1].config]
    await saver.adelete_thread("async-1")
    assert await saver.aget_tuple(config) is None and list(saver.list(None)) == []
