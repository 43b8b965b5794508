"""The issue's end-to-end test: ``langchain-openai``'s ``ChatOpenAI`` pointed at a real
``loom serve`` (the real default model) drives a LangGraph tool graph whose state lives in
Loom's database through ``LoomCheckpointSaver``, over two turns.  Turn 2 runs on a new graph
and a new saver (as after a restart) with the same ``thread_id``: it must see turn 1's
messages restored, send them to the server, and run the tool again with parsed arguments.

SmolLM2-135M chooses tools poorly, so the graph forces each turn's first call with
``tool_choice="required"`` (Loom enforces it with constrained decoding) and answers after the
tool with ``tool_choice="none"``; nothing is asserted on the model's prose."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from loom.api.langgraph import LoomCheckpointSaver

RAN: list[tuple[int, int]] = []


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers a and b."""
    RAN.append((a, b))
    return a * b


class _Sent(BaseCallbackHandler):
    """The message lists ``ChatOpenAI`` sent, one per model call (LangChain's callback hook)."""

    def __init__(self) -> None:
        self.calls: list[list] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:  # noqa: ANN001
        self.calls.extend(messages)


def _graph(base_url: str, saver: LoomCheckpointSaver):  # noqa: ANN202
    llm = ChatOpenAI(model="loom", base_url=base_url, api_key="unused", temperature=0, max_retries=0,
                     timeout=120)
    call_tool = llm.bind_tools([multiply], tool_choice="required").bind(max_tokens=64)
    answer = llm.bind_tools([multiply], tool_choice="none").bind(max_tokens=12)

    def agent(state: MessagesState) -> dict:
        model = call_tool if isinstance(state["messages"][-1], HumanMessage) else answer
        return {"messages": [model.invoke(state["messages"])]}

    # LangGraph's tool-calling agent, as its docs build it
    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([multiply]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=saver)


def _kinds(messages: list) -> list[str]:
    return [type(m).__name__ for m in messages]


def _check_tool_round(messages: list, ran: tuple[int, int]) -> None:
    """A forced call with int arguments, the tool's result under the same id, then an answer."""
    human, call, result, final = messages
    assert isinstance(human, HumanMessage) and isinstance(final, AIMessage) and not final.tool_calls
    (tc,) = call.tool_calls
    assert tc["name"] == "multiply" and tc["id"].startswith("call_")
    assert (tc["args"]["a"], tc["args"]["b"]) == ran and all(isinstance(v, int) for v in ran)
    assert isinstance(result, ToolMessage) and result.tool_call_id == tc["id"]
    assert result.content == str(ran[0] * ran[1])


@pytest.mark.slow
def test_chatopenai_langgraph_two_turn_tool_conversation_restored_from_loom_checkpointer(real_server) -> None:
    base_url, db_url = real_server.url + "/v1", real_server.db_url
    config = {"configurable": {"thread_id": f"lc-{uuid.uuid4().hex[:8]}"}}
    RAN.clear()

    first = _graph(base_url, LoomCheckpointSaver(db_url)).invoke(
        {"messages": [HumanMessage("What is 6 times 7? Use the multiply tool.")]}, config)
    turn1 = first["messages"]
    assert _kinds(turn1) == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert len(RAN) == 1
    _check_tool_round(turn1, RAN[0])

    saver = LoomCheckpointSaver(db_url)  # a new saver and a new graph: only the database remembers
    restored = saver.get_tuple(config).checkpoint["channel_values"]["messages"]
    assert [(type(m), m.content, getattr(m, "tool_calls", None)) for m in restored] == [
        (type(m), m.content, getattr(m, "tool_calls", None)) for m in turn1]

    sent = _Sent()
    second = _graph(base_url, saver).invoke(
        {"messages": [HumanMessage("Now multiply 12 by 3 with the tool.")]}, {**config, "callbacks": [sent]})
    turn2 = second["messages"]
    assert [m.id for m in turn2[:4]] == [m.id for m in turn1]  # turn 1 kept as it was
    assert len(RAN) == 2
    _check_tool_round(turn2[4:], RAN[1])
    # the server got turn 1's whole exchange (call, tool result, answer) ahead of the new question
    first_call = sent.calls[0]
    assert _kinds(first_call) == _kinds(turn1) + ["HumanMessage"]
    assert [m.content for m in first_call[:4]] == [m.content for m in turn1]
    # every checkpoint of both turns is listed from the database, newest first
    steps = [t.metadata["step"] for t in saver.list(config)]
    assert steps == sorted(steps, reverse=True) and steps[-1] == -1 and len(steps) == 10
