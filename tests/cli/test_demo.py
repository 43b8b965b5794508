"""The demo's scripted session (``loom.cli.demo.run_session``) on the real default model
over a small stdlib index: every turn finishes, a documentation answer ends with a source
checked against what was retrieved, the forced calculator call computes, and a fact stored
in one turn is recalled in a later one."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from loom.cli.demo import SCRIPT, Turn, answer_is_right, open_index, run_session

CORPUS = ("stdlib:module/os.path", "stdlib:module/functools")


def _turn(pred):
    return next(t for t in SCRIPT if pred(t))


@pytest.fixture
def console():
    return Console(file=io.StringIO(), record=True, width=200, highlight=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The index built as an older demo left it (one module), then opened with the demo's corpus."""
    log = Console(file=io.StringIO(), record=True, width=200)
    path = tmp_path_factory.mktemp("demo") / "index"
    open_index(log, path, CORPUS[:1])
    return open_index(log, path, CORPUS), log.export_text()


@pytest.fixture
def small_index(built):
    return built[0]


def test_open_index_adds_what_an_older_index_lacks_then_reuses_it(built, console):
    retriever, log = built
    assert "Ingesting stdlib:module/functools" in log and retriever.documents() == sorted(CORPUS)
    again = open_index(console, retriever.index_dir, CORPUS)
    assert "(reused)" in console.export_text() and len(again) == len(retriever)


async def test_demo_session_cites_retrieved_section_calculates_and_recalls(real_model, small_index, console,
                                                                           tmp_path):
    from loom.memory import LongTermMemory

    doc = _turn(lambda t: "os.path.join" in t.message)
    remember = _turn(lambda t: t.message.startswith("Remember"))
    calc = _turn(lambda t: t.tool_choice == "calculator")
    recall = _turn(lambda t: t.tool_choice == "recall")
    memory = LongTermMemory(f"sqlite:///{tmp_path / 'memory.db'}", embedder=small_index.embedder)
    outcomes = await run_session(console, str(real_model), small_index, memory,
                                 script=[doc, remember, calc, recall], max_tokens=64, ledgers=False)
    out = console.export_text()
    assert [o.result.final_state for o in outcomes] == ["done"] * 4, out

    first = outcomes[0]
    labels = {s.label for s in first.check.sources}
    assert "os.path — join" in labels, out
    assert all(any(s.hit is h for h in first.result.retrieved) for s in first.check.sources)
    assert "Sources: " in out and "[os.path — join]" in out

    assert any("asyncio" in text for text in outcomes[1].stored), out

    (call,) = outcomes[2].result.tool_calls
    assert call.name == "calculator" and call.arguments == {"expression": "365 * 24"}, out
    assert outcomes[2].result.tool_results[0].content == "8760"
    assert "tool calculator → 8760" in out

    (call,) = outcomes[3].result.tool_calls
    assert call.name == "recall" and call.error is None
    assert "asyncio" in outcomes[3].result.tool_results[0].content, out
    # each answer is checked by its facts: SmolLM2 (greedy) gets the first three right
    assert [o.right for o in outcomes[:3]] == [True, True, True], out
    assert out.count("check: right") >= 3


def test_a_turn_is_right_when_its_answer_holds_every_fact_as_whole_tokens_and_was_not_cut(console) -> None:
    turn = Turn("What is collections.Counter?", facts=(("dict", "dictionary"), ("count", "counting")))
    assert answer_is_right(turn, "A dict subclass for counting hashable objects.", [])
    assert not answer_is_right(turn, "A dictionary of accounts.", [])  # "count" inside "accounts" is no fact
    assert not answer_is_right(turn, "A dict subclass for counting, counting, counting", [], cut=True)
    remember = Turn("Remember: my favourite module is asyncio.", stored=(("asyncio",),))
    assert answer_is_right(remember, "Noted.", ["User's favourite module is asyncio"])
    assert not answer_is_right(remember, "Noted.", [])
    assert answer_is_right(Turn("Hello"), "Hi!", []) is None
    assert all(t.facts or t.stored for t in SCRIPT)  # every demo turn is checked
