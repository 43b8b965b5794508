"""``loom demo`` (``make demo``): an agentic RAG session on real documents, end to end.

What it does, with no network:

1. resolves the model: Loom's default, Qwen2.5-Coder-0.5B-Instruct in int8
   (``loom.runtime.checkpoint.registry.default_model``: ``$LOOM_MODEL`` or
   ``DEFAULT_MODEL``, pulled by ``make demo``), or
   anything ``--model`` names (a registered name, a folder, a ``.gguf``, a hub
   id, ``random:ARCH-PRESET``; random weights answer noise, and a panel says so);
2. ingests part of the standard library's documentation (the language
   topics and a few modules, :data:`CORPUS`) into a FAISS + BM25 index, once;
   a later run reuses it and adds only the documents an older index lacks;
3. starts the engine in this process and runs a scripted multi-turn agent
   session (:data:`SCRIPT`): documentation questions answered from the
   retrieved sections, each answer followed by its ``Sources:`` line (checked
   against what was retrieved, :mod:`loom.orchestrator.citations`); a memory
   written in one turn and recalled by a forced ``recall`` call later; a
   ``calculator`` call forced with ``tool_choice``; output streamed as it is
   generated; each answer checked against the facts a right one holds
   (:attr:`Turn.facts`, scored as the ``qa`` suite scores: whole tokens);
4. prints each turn's tokens by class (cached / computed), TTFT, TPOT and
   cost, then the session totals and the prefix-cache hit rate;
5. ends with a short ``sessions`` eval (prefix caching on vs off), a bar of its
   requests on stderr (:mod:`loom.cli.progress`), then its comparison table in
   the terminal and the path of its report.

Everything lives under ``--workdir`` (default ``.loom/``), so a second run
reuses the index.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer
from rich.console import Console

from loom.cli.console import QUANTIZATION_OPTION, resolve_model
from loom.runtime.checkpoint.registry import default_model
from loom.cli.logs import quiet_logs

if TYPE_CHECKING:  # the orchestrator imports torch: loaded by the demo, not by `loom --help`
    from loom.orchestrator.citations import CitationCheck
    from loom.orchestrator.events import RunResult


Facts = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Turn:
    """One scripted user turn and what a right answer holds.

    ``tool_choice`` None is the agent's default (``auto``).  ``facts``: every fact
    (any of its alternatives) must occur in the answer as whole tokens, the
    ``qa`` suite's strict scoring (:func:`loom.evals.qa.score_answer`);
    ``stored``: the same, over the memories the turn stored.
    """

    message: str
    tool_choice: str | None = None
    facts: Facts = ()
    stored: Facts = ()


# Phrasings checked on SmolLM2-135M (greedy, so repeatable): "How many hours ... Compute 365 * 24."
# gives the call {"expression": "365 * 24"} at every point of the session, where "What is 17 * 23 + 4?"
# breaks once unrelated retrieved text is in view; "Remember: ..." gets a short reply where
# "Remember that ..." drifts into a paragraph about threads; the write-back stores the fact either way.
# The facts are the documentation's own words for each answer ("Join one or more path segments", "a dict
# subclass for counting hashable objects", "Decorator to wrap a function with a memoizing callable", ...).
SCRIPT: tuple[Turn, ...] = (
    Turn("What does os.path.join do?",
         facts=(("join", "joins", "joining", "combines", "concatenates"),
                ("component", "components", "segment", "segments", "parts"))),
    Turn("Remember: my favourite module is asyncio.", stored=(("asyncio",),)),
    Turn("What is collections.Counter?",
         facts=(("dict", "dictionary", "dict subclass", "mapping"), ("count", "counts", "counting", "tally"))),
    Turn("How many hours are in a year? Compute 365 * 24.", "calculator", facts=(("8760",),)),
    Turn("What does functools.lru_cache do?",
         facts=(("decorator",), ("cache", "caches", "caching", "memoize", "memoizes", "memoizing"))),
    Turn("What does the with statement do?", facts=(("context manager", "context managers"),)),
    Turn("What is my favourite module?", "recall", facts=(("asyncio",),)),
)
# The language topics (what help("with") shows) and a few much-used modules: ~1,000 chunks.
CORPUS: tuple[str, ...] = ("stdlib:topics", "stdlib:module/os.path", "stdlib:module/json",
                           "stdlib:module/collections", "stdlib:module/functools", "stdlib:module/pathlib")
NAMESPACE = "demo-user"
# + loom.orchestrator.citations.CITE_INSTRUCTION (added in run_session: the orchestrator loads torch)
SYSTEM_PROMPT = ("You are Loom's documentation assistant for the Python standard library. Answer the question "
                 "in one or two sentences, using the retrieved documents. ")
# One paragraph per answer: SmolLM2-135M's first paragraph is its answer, later ones drift.
ANSWER_STOP = ("\n\n",)


@dataclass
class TurnOutcome:
    """What one scripted turn produced: the agent's result, its checked sources, memories it stored, and
    whether the answer is right by the turn's facts (``None``: the turn states none)."""

    result: RunResult
    check: CitationCheck
    stored: list[str] = field(default_factory=list)
    right: bool | None = None


def answer_is_right(turn: Turn, answer: str, stored: Sequence[str], cut: bool = False) -> bool | None:
    """Whether ``answer`` (and the memories the turn ``stored``) hold every fact of ``turn``; ``None`` when
    it states none.  An answer ``cut`` at ``max_tokens`` is not right: it ran on (a small model repeating
    itself) instead of ending."""
    from loom.evals.qa import score_answer

    if not turn.facts and not turn.stored:
        return None
    return ((not turn.facts or (not cut and score_answer(answer, turn.facts, turn.message).correct))
            and (not turn.stored or score_answer("\n".join(stored), turn.stored).correct))


def _console() -> Console:
    return Console(highlight=False)


def _has(source: str, documents: set[str]) -> bool:
    if source == "stdlib:topics":
        return any(d.startswith("stdlib:topic/") for d in documents)
    return source in documents  # stdlib:module/<name> is the document's id


def open_index(console: Console, index_dir: Path, corpus: Sequence[str] = CORPUS) -> Any:
    """Open the index in ``index_dir`` and ingest the parts of ``corpus`` it lacks (all of it the first time).

    An index from an older demo (topics only) gets the missing modules added;
    documents already there are not embedded again.
    """
    from loom.retrieval import Retriever

    retriever = Retriever.open(index_dir)
    missing = [s for s in corpus if not _has(s, set(retriever.documents()))]
    if missing:
        what = "the standard-library documentation" if len(retriever) == 0 else ", ".join(missing)
        console.print(f"[bold]Ingesting {what}[/] (once; reused next time)")
        console.print(retriever.ingest(missing).summary())  # a bar of the chunks embedded on a terminal
    else:
        console.print(f"Index: {len(retriever)} chunks in {index_dir} (reused)")
    return retriever


async def run_session(console: Console, model: str, retriever: Any, memory: Any,
                      script: Sequence[Turn] = SCRIPT, max_tokens: int = 96,
                      ledgers: bool = True, quantization: str | None = "auto") -> list[TurnOutcome]:
    """Run ``script`` as one agent session over ``retriever`` and ``memory``, printing every turn.

    Each turn prints the streamed answer, the sections retrieved for it, its
    ``Sources:`` line, any memory it stored and (``ledgers``) its ledger.
    The memory namespace :data:`NAMESPACE` is cleared first, so what is recalled
    was stored in this session.
    """
    from loom.cli.progress import spinner
    from loom.cli.turns import SOURCES_LEGEND, print_retrieved, print_sources, stream_turn
    from loom.orchestrator import Agent, ContextBudget, InMemorySession
    from loom.orchestrator.citations import CITE_INSTRUCTION
    from loom.orchestrator.ledger_table import ledger_table
    from loom.runtime import AsyncLLM, SamplingParams
    from loom.tools.builtin import calculator, memory_tools

    memory.forget(NAMESPACE)
    with spinner("Loading the model…"):
        llm = AsyncLLM(model, max_model_len=4096, quantization=quantization)
    try:
        agent = Agent(
            llm, tools=[calculator, *memory_tools(memory, NAMESPACE)], retriever=retriever, memory=memory,
            memory_namespace=NAMESPACE, system_prompt=SYSTEM_PROMPT + CITE_INSTRUCTION, max_steps=3, retrieval_k=2,
            budget=ContextBudget(reserved_output=max_tokens, max_retrieval_tokens=512),
            sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(ANSWER_STOP)))
        session, outcomes = InMemorySession(), []
        console.print(SOURCES_LEGEND, style="dim", markup=False)
        for i, turn in enumerate(script, 1):
            console.print(f"\n[bold cyan]user>[/] {turn.message}"
                          + (f"  [dim](tool_choice={turn.tool_choice})[/]" if turn.tool_choice else ""))
            known = {m.id for m in memory.list(NAMESPACE)}
            result = await stream_turn(console, agent, session, turn.message, turn.tool_choice)
            assert result is not None  # Agent.stream always ends with its DoneEvent
            print_retrieved(console, result)
            check = print_sources(console, result)
            stored = [m.text for m in memory.list(NAMESPACE) if m.id not in known]
            for text in stored:
                console.print(f"  [magenta]memory stored[/]: {text}", highlight=False)
            right = answer_is_right(turn, result.answer, stored, cut=result.finish_reason == "length")
            if right is not None:
                console.print(f"  check: {'[green]right[/]' if right else '[red]wrong[/]'} "
                              f"(holds {_facts_text(turn)})", highlight=False)
            outcomes.append(TurnOutcome(result, check, stored, right))
            if result.compactions:
                console.print(f"[magenta]history compacted[/] ({result.compactions}x this turn: oldest turns "
                              "dropped from the view sent to the model; the stored log is unchanged)")
            if ledgers:
                console.print(ledger_table(result.usage, f"turn {i}: tokens, time and cost by class"))
        return outcomes
    finally:
        llm.shutdown()


def _facts_text(turn: Turn) -> str:
    def one(facts: Facts) -> str:
        return " and ".join(" or ".join(repr(a) for a in alts[:3]) for alts in facts)
    return "; ".join(filter(None, [one(turn.facts), f"stored: {one(turn.stored)}" if turn.stored else ""]))


def print_checks(console: Console, outcomes: Sequence[TurnOutcome]) -> None:
    """One line: how many checked turns were answered right, and which were not."""
    checked = [(i, o) for i, o in enumerate(outcomes, 1) if o.right is not None]
    wrong = [i for i, o in checked if not o.right]
    console.print(f"[bold]answers checked[/]: {len(checked) - len(wrong)} of {len(checked)} right"
                  + (f" (wrong: turn {', '.join(map(str, wrong))})" if wrong else ""))


def _totals(console: Console, results: list[RunResult]) -> None:
    from loom.orchestrator.ledger import Ledger
    from loom.orchestrator.ledger_table import ledger_table

    total = Ledger.sum(r.usage for r in results)
    console.print(ledger_table(total, "session totals"))
    later = Ledger.sum(r.usage for r in results[1:])
    console.print(f"[bold]prefix-cache hit rate[/]: {total.cache_hit_rate:.1%} over the session, "
                  f"{later.cache_hit_rate:.1%} from turn 2 on; "
                  f"{total.cached_tokens} of {total.prompt_tokens} prompt tokens served from cache")


def closing_eval(console: Console, model: str, workdir: Path, **overrides: Any) -> Any:
    """The demo's closing ``sessions`` eval: prefix caching on against off, the same requests.

    Shows a bar of the requests done per variant on stderr, then prints the comparison
    table (:func:`loom.evals.compare.comparison_table`: each
    metric with its ratio to caching on) and the report's path; returns the
    ``evals.EvalResult``.  ``overrides``: further ``evals.run`` arguments
    (a smaller run, e.g. ``num_requests``, ``options``).
    """
    from loom import evals
    from loom.cli.progress import bar
    from loom.evals.compare import comparison_table

    console.print("\n[bold]Short `sessions` eval[/]: the same multi-turn chats with prefix caching on and off")
    out = workdir / "eval-sessions"
    with bar() as update:
        res = evals.run(**{"suite": "sessions", "model": model, "out": out, "small": True,
                           "compare": ["enable_prefix_caching=false"], "progress": update, **overrides})
    console.print(comparison_table(res.summary["comparison"]))
    console.print(f"eval report: [bold]{res.report_path or out}[/]")
    return res


def demo(
    model: Optional[str] = typer.Option(None, "--model", help="Registered name, folder, .gguf, hub id or "
                                        "random:ARCH-PRESET (default: $LOOM_MODEL, else qwen2.5-coder-0.5b-instruct)."),
    workdir: Path = typer.Option(Path(".loom"), "--workdir", help="Where the index, memory and reports "
                                 "live (reused across runs)."),
    max_tokens: int = typer.Option(96, "--max-tokens", help="Output tokens per model call."),
    run_eval: bool = typer.Option(True, "--eval/--no-eval", help="Finish with a short sessions eval."),
    quantization: str = QUANTIZATION_OPTION,
) -> None:
    """Run the end-to-end agentic RAG demo (what `make demo` runs).

    Example: loom demo --model random:qwen3-small --no-eval
    """
    quiet_logs()
    console = _console()
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model(console, model, "Without --model the demo runs Loom's default model, a real one.")
    retriever = open_index(console, workdir / "index")
    from loom.memory import LongTermMemory

    # One MiniLM in the process: memory reuses the retriever's embedder.
    memory = LongTermMemory(f"sqlite:///{workdir / 'memory.db'}", embedder=retriever.embedder)
    # the name, not the folder: quantization "auto" reads the registered model's format
    name = model or default_model()
    outcomes = asyncio.run(run_session(console, name, retriever, memory, max_tokens=max_tokens,
                                       quantization=quantization))
    _totals(console, [o.result for o in outcomes])
    print_checks(console, outcomes)
    if run_eval:  # the same weights as the session (a folder alone would load float32)
        from loom.runtime.checkpoint.registry import registered_format

        fmt = registered_format(name) if quantization == "auto" else quantization
        closing_eval(console, model_path, workdir, engine={"quantization": fmt})
