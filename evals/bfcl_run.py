"""One BFCL entry through Loom's agent loop, its result in the form BFCL's FC handlers write.

Every entry runs as ``orchestrator.Agent`` turns on the in-process engine
(greedy), the tools rendered by the model's own chat template and the reply
parsed by the model's own tool-call format: the product's tool-call path.
Two modes:

* ``free``: ``tool_choice="auto"``; the model decides whether and what to call.
* ``constrained``: ``tool_choice="required"``; the call is decoded under
  Loom's grammar (``orchestrator.formats.grammar.force_call``) on each turn's
  first model call, then the loop goes back to ``"auto"`` (Loom's rule, so a
  multi-turn turn can end).  ``parallel_tool_calls`` is left unset, Loom's
  default: a forced reply is exactly one call.
* ``constrained_parallel``: the same with ``parallel_tool_calls=True``: the
  grammar allows one or more calls in the model's format (the only forced
  mode in which BFCL's ``parallel*`` categories can pass).

Single-turn entries: the tools are ``ClientTool``\\s, so the turn pauses on
its calls and nothing runs (BFCL scores the calls, not their results).
Multi-turn entries: each tool runs BFCL's API simulators
(``execute_multi_turn_func_call``, the instances BFCL keeps per model name
and entry); a turn ends at a reply without calls, and after
``MAXIMUM_STEP_LIMIT`` + 1 steps with calls the entry is force-quit, as
BFCL's ``inference_multi_turn_FC`` does.

Result shapes (BFCL's OpenAI FC handler): a reply with calls is
``[{name: arguments_json}, ...]`` (a malformed call keeps ``""``, which
BFCL's decoder rejects), a reply without calls is its text; a multi-turn
result is a list of turns, each a list of step replies.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from loom.json_types import JSONObject
from loom.tools.client_tool import ClientTool

from loom.evals.bfcl_data import Entry, call_strings, checkers, dumps_args, openai_tools, user_text

MODES = ("free", "constrained", "constrained_parallel")
TOOL_CHOICE = {"free": "auto", "constrained": "required", "constrained_parallel": "required"}


@dataclass
class EntryRun:
    """What one entry produced in one mode.

    Attributes:
        result: the BFCL model result (see the module docstring).
        calls: every call the model made, ``(name, arguments, parse_error)``.
        schemas: tool name -> the parameter schema the model was shown.
        prompt_tokens / cached_tokens / completion_tokens: summed over the entry's model calls.
        ms: wall time of the entry's turns (milliseconds).
        force_quit: a multi-turn entry stopped at BFCL's step limit.
        error: an exception that ended the entry (``"Type: message"``), else ``None``.
    """

    id: str
    result: Any = None
    calls: list[tuple[str, JSONObject, str | None]] = field(default_factory=list)
    schemas: dict[str, JSONObject] = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ms: float = 0.0
    force_quit: bool = False
    error: str | None = None


class SimulatedTool(ClientTool):
    """A BFCL multi-turn function, run on BFCL's API simulator instances of one entry and mode."""

    requires_approval = False
    executor = "bfcl"

    def __init__(self, tool: JSONObject, entry: Entry, instance_name: str) -> None:
        fn = tool["function"]
        super().__init__(fn["name"], fn.get("description", ""), fn.get("parameters"))
        self.entry, self.instance_name = entry, instance_name

    async def ainvoke(self, arguments: JSONObject) -> str:
        """Run the call as BFCL's inference loop does; errors come back as BFCL's result text."""
        d = self.entry.data
        calls = call_strings([{self.name: dumps_args(arguments)}])
        results, _ = checkers().execute_multi_turn_func_call(
            calls, d.get("initial_config", {}), d["involved_classes"], self.instance_name, d["id"],
            long_context=False, is_evaL_run=False)
        return str(results[0])


def _agent(llm: Any, tools: list[Any], system: str, mode: str, max_steps: int, max_tokens: int) -> Any:
    from loom.orchestrator import Agent, ContextBudget
    from loom.runtime import SamplingParams

    return Agent(llm, tools=tools, system_prompt=system, max_steps=max_steps,
                 budget=ContextBudget(reserved_output=max_tokens),
                 sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                 tool_choice=TOOL_CHOICE[mode],
                 parallel_tool_calls=True if mode == "constrained_parallel" else None,
                 condense_question=False, memory_write_back=False)


def _account(run: EntryRun, result: Any) -> None:
    usage = result.usage
    run.prompt_tokens += usage.prompt_tokens
    run.cached_tokens += usage.cached_tokens
    run.completion_tokens += usage.completion_tokens


async def run_single(llm: Any, entry: Entry, mode: str, max_tokens: int) -> EntryRun:
    """One single-turn entry: one model call, its calls collected and not run.

    Raises:
        whatever the agent raises before its first model call (the caller records it).
    """
    from loom.orchestrator.events import DoneEvent, ToolCallEvent

    run = EntryRun(entry.id)
    tools = [ClientTool(t["function"]["name"], t["function"].get("description", ""), t["function"]["parameters"])
             for t in openai_tools(entry.data["function"])]
    run.schemas = {t.name: t.parameters for t in tools}
    system, user = user_text(entry.data["question"][0])
    agent = _agent(llm, tools, system, mode, 1, max_tokens)
    t0 = time.perf_counter()
    final: dict[int, ToolCallEvent] = {}
    done = None
    async for ev in agent.stream(user):
        if isinstance(ev, ToolCallEvent) and (ev.arguments is not None or ev.error is not None):
            final[ev.index] = ev
        elif isinstance(ev, DoneEvent):
            done = ev.result
    run.ms = (time.perf_counter() - t0) * 1000.0
    calls = [final[i] for i in sorted(final)]
    run.calls = [(c.name or "", dict(c.arguments or {}), c.error) for c in calls]
    run.result = ([{c.name or "": "" if c.error else dumps_args(dict(c.arguments or {}))} for c in calls]
                  if calls else (done.answer if done is not None else ""))
    if done is not None:
        _account(run, done)
    return run


def _steps(result: Any) -> list[Any]:
    """One turn's step replies, BFCL-shaped, from the agent's ``RunResult``."""
    by_step: dict[int, list[JSONObject]] = {}
    for c in result.tool_calls:
        by_step.setdefault(c.step, []).append({c.name: "" if c.error else dumps_args(dict(c.arguments))})
    steps: list[Any] = [by_step[s] for s in sorted(by_step)]
    if result.final_state == "done":
        steps.append(result.answer)
    return steps


async def run_multi_turn(llm: Any, entry: Entry, mode: str, max_tokens: int, max_steps: int | None = None) -> EntryRun:
    """One multi-turn entry: each BFCL turn a user turn of one agent session.

    ``max_steps``: model calls per turn (default BFCL's ``MAXIMUM_STEP_LIMIT`` + 1).

    Raises:
        whatever the agent raises before a turn's first model call (the caller records it).
    """
    from loom.orchestrator import InMemorySession

    b = checkers()
    run = EntryRun(entry.id, result=[])
    # BFCL keeps simulator instances per (model name, entry): a fresh name per run starts from the initial state
    instance_name = f"loom_{mode}_{uuid.uuid4().hex[:8]}"
    tools = [SimulatedTool(t, entry, instance_name) for t in openai_tools(entry.data["function"])]
    run.schemas = {t.name: t.parameters for t in tools}
    steps_cap = max_steps or b.MAXIMUM_STEP_LIMIT + 1
    agent = _agent(llm, tools, "", mode, steps_cap, max_tokens)
    session = InMemorySession()
    t0 = time.perf_counter()
    for messages in entry.data["question"]:
        system, user = user_text(messages)
        result = await agent.arun(user if not system else f"{system}\n{user}", session=session)
        _account(run, result)
        run.calls += [(c.name, dict(c.arguments), c.error) for c in result.tool_calls]
        run.result.append(_steps(result))
        if result.final_state == "max_steps":
            run.force_quit = True
            break
        if result.final_state == "error":
            run.error = result.error
            break
    run.ms = (time.perf_counter() - t0) * 1000.0
    return run


async def run_entry(llm: Any, entry: Entry, mode: str, max_tokens: int, max_steps: int | None = None) -> EntryRun:
    """:func:`run_single` or :func:`run_multi_turn`; an exception becomes ``EntryRun.error``.

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in MODES:
        raise ValueError(f"mode: one of {', '.join(MODES)} expected, got {mode!r}")
    try:
        if entry.multi_turn:
            return await run_multi_turn(llm, entry, mode, max_tokens, max_steps)
        return await run_single(llm, entry, mode, max_tokens)
    except Exception as exc:  # noqa: BLE001 - one failed entry is scored as wrong, the run goes on
        return EntryRun(entry.id, result=[] if entry.multi_turn else "", error=f"{type(exc).__name__}: {exc}")
