"""``loom chat``'s loop on the real default model over a real stdlib index: a follow-up's
rewrite is shown before the retrieved sections, and --no-condense-question turns it off; run as a
subprocess, no library log line lands in a streamed answer, and ``-v`` logs the loading, all of it
before the first prompt."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
from rich.console import Console

from loom.cli.chat import _build_agent
from loom.cli.chat_loop import chat_loop


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from loom.retrieval import Retriever

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
        chat_loop(console, agent, llm, read)
    finally:
        llm.shutdown()
    return console.export_text()


def test_follow_up_shows_what_it_was_searched_as(real_model, index) -> None:
    out = _chat(real_model, index, condense=True)
    assert out.count("searched as:") == 1  # the follow-up only
    assert out.index("searched as:") < out.rindex("retrieved:")


def test_no_condense_question_searches_the_message_as_typed(real_model, index) -> None:
    assert "searched as:" not in _chat(real_model, index, condense=False)


# --- `loom chat` as a user runs it: a subprocess, stdout and stderr together as a terminal shows them ------
LOG_LINE = re.compile(r"^(INFO|WARNING|DEBUG|ERROR)\b|Loading weights|faiss|HTTP Request|sentence_transformers|"
                      r"Batches", re.MULTILINE)


@pytest.fixture(scope="module")
def chat_runs(real_model, index) -> dict[bool, subprocess.CompletedProcess]:
    """One question to ``loom chat --index``, quiet (default) and with ``-v``, run side by side."""
    from tests.api.server import REPO, _env

    cmd = [sys.executable, "-m", "loom.cli", "chat", "--index", str(index), "--max-tokens", "24",
           "--no-condense-question"]
    procs = {verbose: subprocess.Popen(cmd + (["-v"] if verbose else []), cwd=REPO, env=_env(), text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for verbose in (False, True)}
    runs = {}
    for verbose, proc in procs.items():
        out, _ = proc.communicate("How do I extract all members of a zip archive?\n", timeout=300)
        runs[verbose] = subprocess.CompletedProcess(cmd, proc.returncode, out)
    return runs


def test_chat_prints_no_log_line_between_the_prompt_and_the_sources(chat_runs) -> None:
    run = chat_runs[False]
    assert run.returncode == 0, run.stdout
    turn = run.stdout[run.stdout.index("you> assistant> "):]
    answer = turn[:turn.index("Sources:")]
    assert answer.strip() != "you> assistant>"  # the model said something
    assert not LOG_LINE.search(run.stdout), run.stdout  # not in the answer, nor anywhere else
    retrieved = answer[answer.index("retrieved: "):].splitlines()[0]  # the turn's sections, then its sources
    sources = re.findall(r"\[([^\]]+)\]", turn[turn.index("Sources:"):].splitlines()[0])
    assert sources and all(label in retrieved for label in sources), (retrieved, sources)


def test_chat_verbose_logs_the_loading_and_all_of_it_before_the_first_prompt(chat_runs) -> None:
    run = chat_runs[True]
    assert run.returncode == 0, run.stdout
    first_prompt = run.stdout.index("you> ")
    logs = [m.start() for m in LOG_LINE.finditer(run.stdout)]
    assert any(run.stdout[i:].startswith("INFO") for i in logs)  # -v brings INFO back
    assert max(logs) < first_prompt  # model, embedder, FAISS and BM25 all loaded before the prompt
