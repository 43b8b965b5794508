"""``loom chat``: an interactive terminal chat with the agent.

Runs Loom's default model (Qwen2.5-Coder-0.5B-Instruct, or ``$LOOM_MODEL``) unless ``--model`` names
another; a ``random:`` model gets a warning that its answers are noise.
Streams the reply (reasoning dimmed, tool calls shown as they happen), then,
with an index, the sections retrieved for the turn and the ``Sources:`` line
(each source checked against what was retrieved, :mod:`loom.orchestrator.citations`).
The session is append-only, so every turn after the first is served mostly from
the prefix cache.  ``--index`` without ``--db`` is a documentation-QA chat by default, as a REST
session with an index and no memory is: a question nothing retrieved is related to, or whose answer
names code, values or numbers none of the shown sections holds (or only restates the question), is
answered "The indexed documents do not cover this." (``--no-match-answer TEXT`` says it otherwise)
instead of a guess (:mod:`loom.orchestrator.answer_check`); the calculator still answers a calculation
the model hands it.  ``--always-answer`` lets the model answer everything, as it does with ``--db``
(an answer may come from memory) or without ``--index``.  ``--verifier-model`` adds a second, larger
model that judges each documentation answer (:mod:`loom.orchestrator.answer_verifier`).
Slash commands: ``/usage`` prints the session's ledger so far (tokens, time and cost by class),
``/reset`` starts a new session, ``/help`` lists them, ``/exit`` leaves (as do Ctrl-D and Ctrl-C at the prompt);
Ctrl-C during a reply stops the reply and keeps the chat (:mod:`loom.cli.chat_loop`).

Everything a turn needs (model, embedder, FAISS and BM25 index, memory) loads
before the first prompt, behind a spinner, and library logs stay quiet
(:func:`loom.cli.logs.quiet_logs`): no log line or progress bar lands inside a
streamed answer.  ``loom chat -v`` brings INFO logs back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from loom.cli.chat_loop import StoppableEngine, chat_loop
from loom.cli.console import QUANTIZATION_OPTION
from loom.orchestrator.chat_agent import CHAT_HISTORY_TOKENS, chat_agent, default_no_match_answer, default_system
from loom.runtime.checkpoint.registry import default_model


class SetupError(Exception):
    """The index or the memory database of ``loom chat`` cannot be opened; the message is one line."""


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _build_agent(model: str, index: Path | None, db: str | None, namespace: str, system: str,
                 max_tokens: int, condense_question: str | None = "history",
                 quantization: str | None = "auto",
                 no_match_answer: str | None = None,
                 max_history_tokens: int | None = CHAT_HISTORY_TOKENS,
                 verifier_model: str | None = None) -> tuple[StoppableEngine, Any]:
    """The engine (stoppable by Ctrl-C) and the agent over ``index`` and ``db``, every lazy part loaded now;
    with ``verifier_model``, the agent's ``AnswerVerifier`` on an engine of its own (``agent.parts.verifier``).

    Raises:
        SetupError: the index or the memory database cannot be opened (one-line message).
        loom.runtime.errors.LoomError, ValueError, OSError: the model cannot be loaded.
    """
    from loom.runtime import AsyncLLM
    from loom.runtime.errors import LoomError

    retriever = memory = None
    if index is not None:
        from loom.retrieval import Retriever

        try:
            retriever = Retriever.open(index, create=False)
            retriever.search("warm-up", k=1)  # loads the embedder, FAISS, BM25 and the object index now
        except (LoomError, ValueError, OSError) as exc:
            raise SetupError(f"index {str(index)!r} cannot be opened: {_first_line(exc)}; "
                             "build one with loom ingest PATH --index DIR") from exc
    if db is not None:
        from loom.memory import LongTermMemory

        try:
            memory = LongTermMemory(db, embedder=getattr(retriever, "embedder", None))
            memory.search("warm-up", namespace)  # loads the embedder (when no index shares one) and the store
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's URL and driver errors share no base with ours
            raise SetupError(f"memory database {db!r} cannot be opened: {_first_line(exc)}; "
                             "pass --db with a SQLAlchemy URL, e.g. sqlite:///memory.db") from exc
    llm = StoppableEngine(AsyncLLM(model, quantization=quantization))
    verifier = None
    if verifier_model is not None:
        from loom.orchestrator.answer_verifier import AnswerVerifier

        try:
            verifier = AnswerVerifier.from_model(verifier_model)
        except BaseException:
            llm.shutdown()
            raise
    agent = chat_agent(llm, retriever, memory, namespace, system, max_tokens, condense_question, no_match_answer,
                       max_history_tokens, verifier)
    return llm, agent


def chat(
    model: Optional[str] = typer.Option(None, "--model", help="Registered name, folder, .gguf, hub id or "
                                        "random:ARCH-PRESET (default: $LOOM_MODEL, else qwen2.5-coder-0.5b-instruct)."),
    index: Optional[Path] = typer.Option(None, "--index", help="Retrieval index folder (from loom ingest)."),
    db: Optional[str] = typer.Option(None, "--db", help="Long-term memory SQLAlchemy URL, "
                                     "e.g. sqlite:///memory.db."),
    namespace: str = typer.Option("default", "--namespace", help="Memory namespace (the user)."),
    system: Optional[str] = typer.Option(None, "--system", help="System prompt (default: a helpful "
                                         "assistant; with --index, one that asks for citations)."),
    max_tokens: int = typer.Option(256, "--max-tokens", help="Output tokens per model call."),
    max_history_tokens: int = typer.Option(CHAT_HISTORY_TOKENS, "--max-history-tokens", min=1,
                                           help="History kept for the next turn, in tokens (older turns are "
                                           "dropped first)."),
    quantization: str = QUANTIZATION_OPTION,
    condense_question: str = typer.Option("history", "--condense-question",
                                          help="With --index, how a follow-up is searched: history (the previous "
                                          "question and this one, no model call), model (the model rewrites it), "
                                          "off (as typed)."),
    no_condense_question: bool = typer.Option(False, "--no-condense-question",
                                              help="Same as --condense-question off."),
    no_match_answer: Optional[str] = typer.Option(None, "--no-match-answer",
                                                  help="With --index, the answer when nothing retrieved is related, "
                                                  "or when the model's answer names code or values no shown "
                                                  "section holds. Default with --index and no --db: \"The indexed "
                                                  "documents do not cover this.\""),
    always_answer: bool = typer.Option(False, "--always-answer",
                                       help="With --index, the model answers every question, related sections "
                                       "or not (the default with --db)."),
    verifier_model: Optional[str] = typer.Option(None, "--verifier-model",
                                                 help="In a documentation-QA chat, a second, larger model (e.g. "
                                                 "qwen2.5-coder-1.5b-instruct) that reads each answer with its "
                                                 "sections and refuses one they do not state (one more prefill "
                                                 "per answer)."),
) -> None:
    """Chat with the agent in the terminal (streaming; /help lists the commands; Ctrl-C stops a reply).

    Example: loom chat --index .loom/index --db sqlite:///.loom/memory.db
    """
    from loom.cli.console import model_error, print_error, resolve_model
    from loom.cli.logs import quiet_logs
    from loom.cli.progress import spinner
    from loom.runtime.errors import LoomError

    quiet_logs()
    console = Console(highlight=False)
    mode = "off" if no_condense_question else condense_question
    if mode not in ("history", "model", "off"):
        print_error(f"--condense-question: must be history, model or off, got {condense_question!r}")
        raise typer.Exit(2)
    if no_match_answer is not None and (index is None or not no_match_answer.strip()):
        print_error("--no-match-answer: needs --index and a non-empty text (the reply when the documents "
                    "do not hold the answer)")
        raise typer.Exit(2)
    if always_answer and no_match_answer is not None:
        print_error("--always-answer and --no-match-answer: give one or the other")
        raise typer.Exit(2)
    no_match_answer = default_no_match_answer(index, db, no_match_answer, always_answer)
    if verifier_model is not None and no_match_answer is None:
        print_error("--verifier-model: judges documentation answers, so it needs --index, and --no-match-answer "
                    "with --db; not --always-answer")
        raise typer.Exit(2)
    path = resolve_model(console, model, "Without --model, loom chat runs Loom's default model, a real one.")
    if system is None:
        system = default_system(index is not None)
    try:
        with spinner("Loading model, embedder and index…"):
            # the name, not the folder: quantization "auto" reads the registered model's format
            llm, agent = _build_agent(model or default_model(), index, db, namespace, system, max_tokens,
                                      None if mode == "off" else mode, quantization, no_match_answer,
                                      max_history_tokens, verifier_model)
    except SetupError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    except (LoomError, ValueError, OSError) as exc:
        print_error(model_error(model or path, exc))
        raise typer.Exit(2) from None
    try:
        chat_loop(console, agent, llm, lambda: console.input("[bold cyan]you>[/] "))
    finally:
        llm.shutdown()
        if agent.parts.verifier is not None:
            agent.parts.verifier.shutdown()
