"""``loom chat``'s loop on the real default model over a real stdlib index: a follow-up's
rewrite is shown before the retrieved sections, and --no-condense-question turns it off; run as a
subprocess, no library log line lands in a streamed answer, and ``-v`` logs the loading, all of it
before the first prompt.  Ctrl-C during a reply stops the reply (its request aborted, its KV blocks
freed, the reply so far kept in the session) and the chat goes on; Ctrl-C at the prompt leaves.
Over an index and without memory it is a documentation-QA chat unless --always-answer is given: a question the
documents do not hold is answered that they do not cover it (or the --no-match-answer text), as is one naming a term
the index never uses."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time

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


def _chat(real_model, quantization, index, condense: str | None = "history",
          questions: tuple[str, ...] = ("How do I extract all members of a zip archive?", "and for tar files?"),
          no_match_answer: str | None = None) -> str:
    """The text ``chat_loop`` prints for ``questions`` typed one after another (then end of input)."""
    llm, agent = _build_agent(str(real_model), index, None, "default", "You are a helpful assistant.", 24,
                              condense_question=condense, quantization=quantization, no_match_answer=no_match_answer)
    lines = iter(questions)

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


def test_a_sum_written_out_after_a_documentation_turn_is_computed_by_the_forced_calculator(
        real_model, real_quantization, index) -> None:
    """Nothing in the index is related to the second message; its expression forces the calculator
    (``answer_check.arithmetic_expression``) instead of the answer standing on no tool call."""
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER

    out = _chat(real_model, real_quantization, index, no_match_answer=NOT_FOUND_ANSWER,
                questions=("How do I extract all members of a zip archive?", "What is 17 * 23?"))
    second = out.split("assistant> ")[2]
    assert "searched as:" not in second, out  # a calculation, not a follow-up of the zip question
    assert "tool call calculator({'expression': '17 * 23'})" in second and "tool result calculator: 391" in second, out
    assert NOT_FOUND_ANSWER not in second, out


def test_no_match_answer_is_the_reply_to_a_question_naming_a_term_the_index_never_uses(
        real_model, real_quantization, index) -> None:
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER

    question = "Which zipfile argument turns on punycode file names?"
    out = _chat(real_model, real_quantization, index, questions=(question,), no_match_answer=NOT_FOUND_ANSWER)
    assert f"assistant> {NOT_FOUND_ANSWER}" in out, out


def test_follow_up_shows_what_it_was_searched_as(real_model, real_quantization, index) -> None:
    # the model's rewrite is always searched with; by default "and for tar files?" is related on its own
    out = _chat(real_model, real_quantization, index, condense="model")
    assert out.count("searched as:") == 1  # the follow-up only
    assert out.index("searched as:") < out.rindex("retrieved:")


def test_no_condense_question_searches_the_message_as_typed(real_model, real_quantization, index) -> None:
    assert "searched as:" not in _chat(real_model, real_quantization, index, condense=None)


# --- `loom chat` as a user runs it: a subprocess, stdout and stderr together as a terminal shows them ------
LOG_LINE = re.compile(r"^(INFO|WARNING|DEBUG|ERROR)\b|Loading weights|faiss|HTTP Request|sentence_transformers|"
                      r"Batches", re.MULTILINE)


#: What each run of ``chat_runs`` asks: quiet, a question the index answers, the model always answering (so the
#: small model's reply and its sources are shown); with ``-v``, by default, one the index does not hold.
CHAT_RUNS = {False: (["--always-answer"], "How do I extract all members of a zip archive?"),
             True: (["-v"], "What is the capital of Peru?")}


@pytest.fixture(scope="module")
def chat_runs(real_model, index) -> dict[bool, subprocess.CompletedProcess]:
    """One question to ``loom chat --index``, quiet and with ``-v`` (:data:`CHAT_RUNS`), run side by side."""
    from tests.api.server import REPO, _env

    cmd = [sys.executable, "-m", "loom.cli", "chat", "--index", str(index), "--max-tokens", "24",
           "--no-condense-question"]
    procs = {verbose: subprocess.Popen(cmd + flags, cwd=REPO, env=_env(), text=True, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for verbose, (flags, _) in CHAT_RUNS.items()}
    runs = {}
    for verbose, proc in procs.items():
        out, _ = proc.communicate(CHAT_RUNS[verbose][1] + "\n", timeout=300)
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


def test_chat_over_an_index_says_the_documents_do_not_cover_a_question_they_do_not_hold(chat_runs) -> None:
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER

    run = chat_runs[True]  # no --always-answer, no --db: a documentation-QA chat
    assert run.returncode == 0, run.stdout
    assert NOT_FOUND_ANSWER in run.stdout[run.stdout.index("you> "):], run.stdout


@pytest.mark.parametrize(("index", "db", "given", "always", "expected"), [
    (None, None, None, False, None),  # no documents: nothing to check an answer against
    ("idx", None, None, False, "default"),
    ("idx", "sqlite:///m.db", None, False, None),  # memory may hold the answer
    ("idx", None, "Not in the docs.", False, "Not in the docs."),
    ("idx", None, None, True, None),
])
def test_a_chat_with_an_index_and_no_memory_is_documentation_qa_unless_told(index, db, given, always,
                                                                              expected) -> None:
    from pathlib import Path

    from loom.orchestrator.chat_agent import default_no_match_answer
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER

    got = default_no_match_answer(index and Path(index), db, given, always)
    assert got == (NOT_FOUND_ANSWER if expected == "default" else expected)


def test_a_reply_cut_at_max_tokens_ends_marked_as_cut(real_model, real_quantization) -> None:
    from loom.cli.turns import stream_turn
    from loom.orchestrator import InMemorySession

    engine, agent = _build_agent(str(real_model), None, None, "default", "You are a helpful assistant.", 4,
                                 quantization=real_quantization)
    console = Console(file=io.StringIO(), width=200, highlight=False)
    try:
        result = asyncio.run(stream_turn(console, agent, InMemorySession(), "Write a long story about a fox."))
    finally:
        engine.shutdown()
    assert result is not None and result.final_state == "done" and result.finish_reason == "length"
    assert result.usage.completion_tokens == 4
    assert console.file.getvalue().rstrip().endswith("[cut at max_tokens]")


def test_verifier_model_gives_the_docs_qa_agent_a_verifier_that_judges_its_answers(real_model, index) -> None:
    import asyncio

    llm, agent = _build_agent(str(real_model), index, None, "default", "You are a helpful assistant.", 24,
                              no_match_answer="Not in the docs.", verifier_model=str(real_model))
    verifier = agent.parts.verifier
    try:
        result = asyncio.run(agent.arun("How do I extract all members of a zip archive?"))
    finally:
        llm.shutdown()
        verifier.shutdown()
    assert result.retrieved and result.final_state == "done"
    # the small model's answer is refused by the lexical check, or judged by the verifier (its margin kept)
    assert result.unsupported or result.unknown_terms or len(result.verifier_margins) >= 1, result


@pytest.mark.parametrize("word", ["exit", "Quit"])
def test_exit_or_quit_typed_alone_leaves_without_a_turn(checkpoint_factory, word: str) -> None:
    llm, agent = _build_agent(str(checkpoint_factory()), None, None, "default", "You are a helpful assistant.", 4)
    lines = iter([word, "never read"])
    console = Console(file=io.StringIO(), record=True, width=200, highlight=False)
    try:
        chat_loop(console, agent, llm, lambda: next(lines))
    finally:
        llm.shutdown()
    assert next(lines) == "never read" and "assistant>" not in console.export_text()


# --- Ctrl-C ------------------------------------------------------------------------------------------------
LONG = "Write a long story about a dragon who learns to fly."


def test_stop_aborts_the_reply_frees_its_kv_blocks_and_keeps_it_in_the_session(real_model, real_quantization) -> None:
    from loom.cli.turns import stream_turn
    from loom.orchestrator import InMemorySession

    engine, agent = _build_agent(str(real_model), None, None, "default", "You are a helpful assistant.", 120,
                                 quantization=real_quantization)
    console = Console(file=io.StringIO(), width=200, highlight=False)
    session = InMemorySession()

    async def stopped_midway():
        turn = asyncio.create_task(stream_turn(console, agent, session, LONG))
        while len(console.file.getvalue().partition("assistant> ")[2].split()) < 3:  # a few words streamed
            await asyncio.sleep(0.02)
        engine.stop()
        return await turn

    try:
        result = asyncio.run(stopped_midway())
        assert result.final_state == "interrupted"
        assert console.file.getvalue().rstrip().endswith("[stopped]")
        reply = session.get_items()[-1]
        assert reply["role"] == "assistant" and reply["content"] and reply["content"] in console.file.getvalue()
        deadline = time.monotonic() + 30
        while (stats := engine.stats())["kv_blocks_free"] != stats["kv_blocks_total"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"] and stats["num_running"] == 0
        engine.arm()  # the next turn, in the same session, runs to its end
        after = asyncio.run(stream_turn(console, agent, session, "Thanks. Now say only: OK."))
        assert after.final_state == "done" and after.usage.cached_tokens > 0  # the session's prefix, cached
    finally:
        engine.shutdown()


class _Chat:
    """``loom chat`` in a subprocess, with SIGINT as a terminal's Ctrl-C; stdout read as it comes."""

    def __init__(self, *args: str) -> None:
        from tests.api.server import REPO, _env

        # SIGINT back to its default (a test run in the background inherits it ignored): Ctrl-C as at a terminal
        self.proc = subprocess.Popen([sys.executable, "-m", "loom.cli", "chat", *args], cwd=REPO, env=_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.out = b""
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        while chunk := os.read(self.proc.stdout.fileno(), 4096):
            self.out += chunk

    def text(self) -> str:
        return self.out.decode(errors="replace")

    def wait_for(self, pred, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not pred(self.text()):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.text()
            time.sleep(0.05)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()


def test_ctrl_c_during_a_reply_stops_it_and_the_chat_goes_on_until_exit(real_model) -> None:
    chat = _Chat("--max-tokens", "120")  # the default model, as a user starts it (real_model: pulled)
    try:
        chat.wait_for(lambda out: out.count("you> ") == 1)
        chat.send(LONG)
        chat.wait_for(lambda out: len(out.partition("assistant> ")[2].split()) >= 3)
        chat.proc.send_signal(signal.SIGINT)
        chat.wait_for(lambda out: "[stopped]" in out and out.count("you> ") == 2)
        chat.send("/help")
        chat.wait_for(lambda out: "/usage" in out.partition("[stopped]")[2] and out.count("you> ") == 3)
        chat.send("Thanks. Now say only: OK.")
        chat.wait_for(lambda out: out.count("you> ") == 4)
        chat.send("/exit")
        assert chat.proc.wait(60) == 0
    finally:
        chat.proc.kill()
    out = chat.text()
    assert "Traceback" not in out and "error" not in out.lower()
    after_help = out.partition("you> /help")[2] if "you> /help" in out else out.partition("[stopped]")[2]
    for command in ("/help", "/usage", "/reset", "/exit"):
        assert command in after_help  # /help lists every slash command
    second = out.rpartition("assistant> ")[2]
    assert second.split("you> ")[0].strip() and "[stopped]" not in second  # answered, to its end


def test_ctrl_c_at_the_prompt_leaves(checkpoint_factory) -> None:
    chat = _Chat("--model", str(checkpoint_factory()))
    try:
        chat.wait_for(lambda out: "you> " in out)
        chat.proc.send_signal(signal.SIGINT)
        assert chat.proc.wait(60) == 0
    finally:
        chat.proc.kill()
    assert "Traceback" not in chat.text()


def test_a_chat_keeps_at_most_max_history_tokens_of_history_dropping_the_oldest_turns(checkpoint_factory) -> None:
    from loom.orchestrator import InMemorySession

    message = "Tell me one more thing about the ferry to Gull Island and when it leaves."
    history = {}
    for cap in (64, None):
        llm, agent = _build_agent(str(checkpoint_factory()), None, None, "default", "You are a helpful assistant.",
                                  4, max_history_tokens=cap)
        session = InMemorySession()
        try:
            results = [agent.run(message, session=session) for _ in range(6)]
        finally:
            llm.shutdown()
        history[cap] = results[-1].usage.prompt["history"].tokens
    assert 0 < history[64] <= 64 < history[None]  # five earlier turns of ~25 tokens each, uncapped
