"""``loom chat``'s loop on the real default model over a real stdlib index: a follow-up's
rewrite is shown before the retrieved sections, and --no-condense-question turns it off."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from evals.chat_cli import _build_agent, _loop


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from retrieval import Retriever

    path = tmp_path_factory.mktemp("chat") / "index"
    Retriever.open(path).ingest(["stdlib:module/zipfile", "stdlib:module/tarfile"], show_progress=False)
    return path


def _chat(real_model, index, condense: bool) -> str:
    llm, agent = _build_agent(str(real_model), index, None, "default", "You are a helpful assistant.", 24,
                              condense_question=condense)
    lines = iter(["How do I extract all members of a zip archive?", "and for tar files?"])

    def read() -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    console = Console(file=io.StringIO(), record=True, width=200, highlight=False)
    try:
        import asyncio

        asyncio.run(_loop(console, agent, read))
    finally:
        llm.shutdown()
    return console.export_text()


def test_follow_up_shows_what_it_was_searched_as(real_model, index) -> None:
    out = _chat(real_model, index, condense=True)
    assert out.count("searched as:") == 1  # the follow-up only
    assert out.index("searched as:") < out.rindex("retrieved:")


def test_no_condense_question_searches_the_message_as_typed(real_model, index) -> None:
    assert "searched as:" not in _chat(real_model, index, condense=False)
