"""Agent loop logic over a scripted stand-in model (ScriptedLLM) and real tools, tokenizer, sessions."""

from __future__ import annotations

import asyncio

import pytest

from loom.orchestrator import Agent, ContextBudget, InMemorySession, SQLSession
from loom.orchestrator.context import ANSWER_REQUEST
from loom.orchestrator.events import DoneEvent, ToolCallEvent, ToolResultEvent
from loom.orchestrator.runner import ANSWER_REGEX
from loom.tools import tool

from tests.orchestrator.scripted_llm import ScriptedLLM


def call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


async def test_tool_call_result_then_answer(tokenizer, tool_set) -> None:
    llm = ScriptedLLM(tokenizer, ["<think>\nneed add\n</think>\n\n" + call("add", '{"a": 2, "b": 40}'),
                                  "The sum is 42."])
    agent = Agent(llm, tools=tool_set, system_prompt="Use tools.")
    session = InMemorySession()
    result = await agent.arun("what is 2+40?", session=session)
    assert result.final_state == "done" and result.answer == "The sum is 42." and result.steps == 2
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("add", {"a": 2, "b": 40})]
    assert [(r.content, r.is_error) for r in result.tool_results] == [("42", False)]
    assert result.reasoning == "need add"
    kinds = [it["kind"] for it in session.get_items()]
    assert kinds == ["user", "assistant", "tool_result", "assistant"]
    # the second call's prompt is the first prompt + its reply + the tool result
    first, second = llm.prompts
    assert second[: len(first)] == first
    assert result.usage.num_calls == 2 and result.usage.output["tool_call"].tokens > 0
    assert result.usage.output["reasoning"].tokens > 0
    assert result.usage.prompt["tool_result"].tokens > 0


async def test_an_answer_that_copies_the_result_wrapper_states_the_result_without_it(tokenizer, tool_set) -> None:
    """Scripted model: after the result it writes the wrapper, the result, the close tag and an invented next one."""
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": 2, "b": 40}'),
                                  "<tool_response>\n42\n</tool_response>\n<tool_response>\n43"])
    agent = Agent(llm, tools=tool_set, system_prompt="Use tools.")
    events = [ev async for ev in agent.stream("what is 2+40?")]
    result = events[-1].result
    assert result.answer == "42"
    streamed = "".join(ev.text for ev in events if type(ev).__name__ == "ContentDelta")
    assert "tool_response" not in streamed and streamed.strip() == "42"
    assert all("</tool_response>" in p.stop for p in llm.params)  # every free step of a tool agent


def _recording_add():
    """An ``add`` tool and the list of the arguments it ran with."""
    runs = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        runs.append((a, b))
        return a + b

    return add, runs


def _is_answer_step(llm: ScriptedLLM, step: int) -> bool:
    """The model call ``step`` (from 1) could not open a tool call: the open marker is a stop (and the answer grammar
    applies, unless the format reasons first: this tokenizer's does), after a prompt ending with the request to answer."""
    sp = llm.params[step - 1]
    so = sp.structured_output
    asked = llm.tokenizer.decode(llm.prompts[step - 1][-40:])
    return (so is None or so.regex == ANSWER_REGEX) and "<tool_call>" in sp.stop and ANSWER_REQUEST in asked


async def test_a_call_repeated_after_its_result_is_not_run_again_and_the_next_reply_is_the_answer(tokenizer) -> None:
    """Scripted model: it asks the same call again after the result (as Qwen2.5-Coder does), then answers."""
    add, runs = _recording_add()
    repeat = call("add", '{"a": 2, "b": 40}')
    llm = ScriptedLLM(tokenizer, [repeat, repeat, "It is 42."])
    agent = Agent(llm, tools=[add], system_prompt="Use tools.", max_steps=6)
    result = await agent.arun("what is 2+40?")
    assert runs == [(2, 40)]  # a tool may act: never twice for the same arguments in one turn
    assert [r.content.splitlines()[0] for r in result.tool_results] == ["42", "42"]
    assert "already made" in result.tool_results[1].content and not result.tool_results[1].is_error
    # the call after the repeat is an answer step: it cannot call, the turn ends with its reply
    assert not _is_answer_step(llm, 2) and _is_answer_step(llm, 3)
    assert result.final_state == "done" and result.steps == 3 and result.answer == "It is 42."


async def test_a_failing_call_made_again_runs_again_and_the_next_reply_is_the_answer(tokenizer) -> None:
    """Scripted model: the same failing call twice (Qwen2.5-Coder-0.5B asked the calculator for a capital five
    times), then the answer step."""
    from loom.tools.builtin import calculator

    failing = call("calculator", '{"expression": "capital of Peru"}')
    llm = ScriptedLLM(tokenizer, [failing, failing, "Lima."])
    result = await Agent(llm, tools=[calculator], max_steps=6).arun("What is the capital of Peru?")
    assert [r.is_error for r in result.tool_results] == [True, True]  # run both times: an error may pass
    assert not _is_answer_step(llm, 2) and _is_answer_step(llm, 3)
    assert result.final_state == "done" and result.steps == 3 and result.answer == "Lima."


async def test_an_answer_step_ends_before_call_markup_a_model_writes_anyway(tokenizer) -> None:
    """Scripted model (it ignores the answer grammar a real engine applies): the stop string ends its answer."""
    add, _ = _recording_add()
    repeat = call("add", '{"a": 2, "b": 40}')
    llm = ScriptedLLM(tokenizer, [repeat, repeat, "It is 42.\n" + repeat])
    result = await Agent(llm, tools=[add], max_steps=6).arun("what is 2+40?")
    assert result.answer == "It is 42." and len(result.tool_calls) == 2


async def test_the_call_after_a_forced_named_call_answers(tokenizer) -> None:
    add, runs = _recording_add()
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": 2, "b": 40}'), "42."])
    result = await Agent(llm, tools=[add], max_steps=6).arun("what is 2+40?", tool_choice="add")
    assert runs == [(2, 40)] and result.answer == "42." and _is_answer_step(llm, 2)


async def test_after_a_required_call_the_model_may_call_again(tokenizer) -> None:
    add, runs = _recording_add()
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": 2, "b": 40}'), call("add", '{"a": 42, "b": 1}'), "43."])
    result = await Agent(llm, tools=[add], max_steps=6).arun("2+40, plus 1?", tool_choice="required")
    assert runs == [(2, 40), (42, 1)] and result.answer == "43." and not _is_answer_step(llm, 2)


async def test_the_same_tool_with_other_arguments_still_runs(tokenizer) -> None:
    add, runs = _recording_add()
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": 2, "b": 40}'), call("add", '{"b": 40, "a": 3}'), "43"])
    result = await Agent(llm, tools=[add], system_prompt="Use tools.").arun("2+40, then 3+40?")
    assert runs == [(2, 40), (3, 40)] and result.answer == "43"


async def test_parallel_tool_calls_run_concurrently(tokenizer) -> None:
    # Each call waits until all three have started: calls run one after another would
    # leave the first waiting alone until the barrier times out (an error result).
    barrier = asyncio.Barrier(3)

    @tool
    async def meet(text: str) -> str:
        """Echo text once the other calls have started too.

        Args:
            text: what to echo.
        """
        async with asyncio.timeout(30):
            await barrier.wait()
        return text

    reply = "\n".join(call("meet", f'{{"text": "t{i}"}}') for i in range(3))
    result = await Agent(ScriptedLLM(tokenizer, [reply, "ok"]), tools=[meet]).arun("echo three")
    assert [(r.content, r.is_error) for r in result.tool_results] == [("t0", False), ("t1", False), ("t2", False)]


async def test_parallel_tool_calls_off_runs_only_the_first_call_and_answers_the_rest(tokenizer, tool_set) -> None:
    reply = "\n".join(call("add", f'{{"a": {i}, "b": 1}}') for i in range(3))
    agent = Agent(ScriptedLLM(tokenizer, [reply, "ok"]), tools=tool_set, parallel_tool_calls=False)
    session = InMemorySession()
    result = await agent.arun("add three times", session=session)
    assert [(r.content, r.is_error) for r in result.tool_results][0] == ("1", False)
    assert all(r.is_error and "one tool at a time" in r.content for r in result.tool_results[1:])
    kinds = [it["kind"] for it in session.get_items()]
    assert kinds == ["user", "assistant", "tool_result", "tool_result", "tool_result", "assistant"]


async def test_tool_errors_timeouts_and_bad_calls_become_results(tokenizer, tool_set) -> None:
    reply = "\n".join([call("explode", '{"text": "x"}'), call("hang", '{"text": "x"}'),
                       call("add", '{"a": "not a number"}'), call("nope", "{}"),
                       '<tool_call>\n{"name": "add", "arguments": {oops}\n</tool_call>'])
    agent = Agent(ScriptedLLM(tokenizer, [reply, "recovered"]), tools=tool_set)
    result = await agent.arun("break things")
    assert result.final_state == "done" and result.answer == "recovered"
    errs = [r.content for r in result.tool_results]
    assert all(r.is_error for r in result.tool_results) and len(errs) == 5
    assert "kaboom" in errs[0] and "timed out" in errs[1] and "invalid arguments" in errs[2]
    assert "unknown tool" in errs[3] and "malformed tool call" in errs[4]


async def test_the_last_step_of_a_runaway_loop_answers(tokenizer, tool_set) -> None:
    # a new call every step (a repeated one would end the turn: see the test above), then the last step must answer
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": %d, "b": 1}' % i) for i in range(2)] + ["1, then 2."])
    session = InMemorySession()
    result = await Agent(llm, tools=tool_set, max_steps=3).arun("loop", session=session)
    assert result.final_state == "done" and result.steps == 3 and len(result.tool_results) == 2
    assert result.answer == "1, then 2." and _is_answer_step(llm, 3) and not _is_answer_step(llm, 2)
    kinds = [(it["kind"], it["role"]) for it in session.get_items()]
    # every call stored with its results; the request to answer closes the last step's results
    assert kinds[-3:] == [("tool_result", "tool"), ("tool_result", "user"), ("assistant", "assistant")]


async def test_a_one_step_agent_can_still_call(tokenizer, tool_set) -> None:
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": 1, "b": 1}')])
    result = await Agent(llm, tools=tool_set, max_steps=1).arun("1+1?")
    assert result.final_state == "max_steps" and len(result.tool_results) == 1 and not _is_answer_step(llm, 1)


async def test_stream_yields_deltas_tool_events_usage_and_done(tokenizer, tool_set) -> None:
    agent = Agent(ScriptedLLM(tokenizer, [call("add", '{"a": 1, "b": 2}'), "three"]), tools=tool_set)
    events = [ev async for ev in agent.stream("1+2?")]
    types = [e.type for e in events]
    assert types[-2:] == ["usage", "done"]
    deltas = [e for e in events if isinstance(e, ToolCallEvent) and e.arguments is None]
    assert "".join(d.arguments_delta for d in deltas) == '{"a": 1, "b": 2}'
    assert any(isinstance(e, ToolResultEvent) and e.content == "3" for e in events)
    assert "".join(e.text for e in events if e.type == "content_delta") == "three"
    assert isinstance(events[-1], DoneEvent) and events[-1].result.usage is events[-2].ledger


async def test_forced_tool_choice_sends_a_call_grammar_then_the_answer_grammar(tokenizer, tool_set) -> None:
    llm = ScriptedLLM(tokenizer, [call("add", '{"a": 1, "b": 2}'), "fine"])
    agent = Agent(llm, tools=tool_set)
    await agent.arun("go", tool_choice={"type": "function", "function": {"name": "add"}})
    grammar = llm.params[0].structured_output.grammar
    open_id = tokenizer.convert_tokens_to_ids("<tool_call>")
    assert grammar.startswith(f"start: <[{open_id}]>") and '"const": "add"' in grammar
    assert _is_answer_step(llm, 2)


def test_bad_arguments_raise_clear_errors(tokenizer, tool_set) -> None:
    llm = ScriptedLLM(tokenizer, [])
    with pytest.raises(ValueError, match="tool_choice"):
        Agent(llm, tools=tool_set, tool_choice="bogus")
    with pytest.raises(ValueError, match="tool_choice"):
        Agent(llm, tool_choice="required")
    with pytest.raises(ValueError, match="max_steps"):
        Agent(llm, max_steps=0)
    with pytest.raises(ValueError, match="message"):
        Agent(llm).run("  ")


async def test_sql_session_continues_with_cached_prefix(tokenizer, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    llm = ScriptedLLM(tokenizer, [f"answer {i}" for i in range(4)])
    agent = Agent(llm, system_prompt="sys")
    for i in range(4):
        r = await agent.arun(f"question {i}", session=SQLSession("u1", url=url))
        if i:
            prev = llm.prompts[i - 1]
            assert llm.prompts[i][: len(prev)] == prev
            assert r.usage.prompt["history"].cached_tokens >= 0.9 * r.usage.prompt["history"].tokens - 16


async def test_budget_compaction_is_rare_and_keeps_tool_pairs(tokenizer, tool_set) -> None:
    replies = []
    for i in range(40):
        replies += [call("add", f'{{"a": {i}, "b": 1}}'), f"The answer is {i + 1}, as computed by the tool."]
    llm = ScriptedLLM(tokenizer, replies, max_model_len=1024)
    # the in-turn compaction (the after-turn prefill would take a scripted reply of its own)
    budget = ContextBudget(reserved_output=64, max_history_tokens=500, low_water=0.4, prefill_after_turn=False)
    agent = Agent(llm, tools=tool_set, budget=budget)
    session = InMemorySession()
    for i in range(40):
        result = await agent.arun(f"add {i} and 1 please", session=session)
        assert result.final_state == "done"
    assert all(len(p) <= agent.budget.prompt_limit for p in llm.prompts)
    assert 1 <= agent.num_compactions <= 10
    items = session.get_items()
    hidden = set()
    for it in items:
        for s, e in it.get("hide", []) if it["kind"] == "compaction" else []:
            hidden.update(range(s, e))
    for i, it in enumerate(items):  # a shown tool result always follows its shown call
        if it["kind"] == "tool_result" and i not in hidden:
            j = i - 1
            while items[j]["kind"] == "tool_result":
                j -= 1
            assert items[j]["kind"] == "assistant" and j not in hidden
    assert len([it for it in items if it["kind"] == "user"]) == 40  # stored log never rewritten


async def test_summarize_compaction_is_a_continuation_made_after_the_turn_and_prefilled(tokenizer) -> None:
    """The summary request extends the turn's own (cached) prompt with one instruction, is made
    after the turn, and the compacted prompt is prefilled so the next turn starts on it."""
    from loom.orchestrator.summarize import INSTRUCTION

    llm = ScriptedLLM(tokenizer, [], max_model_len=1024)
    budget = ContextBudget(reserved_output=32, max_history_tokens=300, compaction="summarize", summary_tokens=16,
                           next_turn_tokens=40)
    agent = Agent(llm, budget=budget)
    session = InMemorySession()
    gen = agent.builder.gen_prompt_ids
    prefilled = None
    for i in range(12):
        llm.replies = [f"Reply number {i} with a few words of padding to grow the history quickly.",
                       "the user asked questions", "-"]
        before = len(llm.prompts)
        result = await agent.arun(f"message {i}", session=session)
        main = llm.prompts[before]
        if prefilled is not None:  # the next turn's prompt starts with the prefilled one
            assert main[: len(prefilled)] == prefilled
            prefilled = None
        assert result.final_state == "done" and result.answer.startswith(f"Reply number {i}")
        assert len(llm.prompts) - before == 1 + 2 * result.compactions  # the turn, then summary + prefill
        if result.compactions:
            summary_prompt, prefilled = llm.prompts[before + 1], llm.prompts[before + 2]
            assert summary_prompt[: len(main) - len(gen)] == main[: -len(gen)]  # continuation of the cached prompt
            assert tokenizer.decode(summary_prompt[len(main):], skip_special_tokens=False).count(INSTRUCTION) == 1
            assert result.after_turn_usage.num_calls == 2
    items = session.get_items()
    markers = [it for it in items if it["kind"] == "compaction"]
    assert markers and all(m["summary"]["content"].endswith("the user asked questions") for m in markers)
    assert all(m.get("after_turn") for m in markers)
    assert not any(INSTRUCTION in str(it.get("content")) for it in items)  # the instruction is never stored
    last_prompt = tokenizer.decode(llm.prompts[-1], skip_special_tokens=False)
    assert "Summary of the earlier conversation:\nthe user asked questions" in last_prompt
    assert "message 0" not in last_prompt
    assert sum(it["kind"] == "user" for it in items) == 12


def test_budget_window_larger_than_engine_is_rejected(tokenizer) -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        Agent(ScriptedLLM(tokenizer, [], max_model_len=1024), budget=ContextBudget(max_model_len=2048))
    with pytest.raises(ValueError, match="reserved_output"):
        ContextBudget(max_model_len=100, reserved_output=100)


async def test_consumer_stopping_early_leaves_a_consistent_session(tokenizer, tool_set) -> None:
    llm = ScriptedLLM(tokenizer, [call("slow_echo", '{"text": "a"}'), "after"])
    agent = Agent(llm, tools=tool_set)
    session = InMemorySession()
    stream = agent.stream("start", session=session)
    async for ev in stream:
        if isinstance(ev, ToolCallEvent) and ev.arguments is not None:
            break  # stop while the tool call is pending
    await stream.aclose()
    assert [it["kind"] for it in session.get_items()] == ["user"]  # no call stored without its result
    llm.replies = ["fresh answer"]
    result = await agent.arun("again", session=session)
    assert result.final_state == "done" and result.answer == "fresh answer"


async def test_tool_result_records_carry_the_tool_duration(tokenizer, tool_set) -> None:
    agent = Agent(ScriptedLLM(tokenizer, [call("slow_echo", '{"text": "x"}'), "ok"]), tools=tool_set)
    result = await agent.arun("go")
    assert result.tool_results[0].duration_ms >= 290.0
    assert result.timings["tools"] >= 290.0 and result.timings["total"] >= result.timings["model"]


async def test_tool_call_ids_are_random_unique_and_agree_across_events_records_and_history(tokenizer, tool_set) -> None:
    """OpenAI clients key tool results by id: ``call_<random>``, never repeated across sessions."""
    import re

    ids = []
    for _ in range(2):  # two sessions, same turn / step / index: the ids must still differ
        reply = "\n".join(call("add", f'{{"a": {i}, "b": 1}}') for i in range(2))
        agent = Agent(ScriptedLLM(tokenizer, [reply, "done"]), tools=tool_set)
        session = InMemorySession()
        events = [ev async for ev in agent.stream("add", session=session)]
        streamed = {ev.id for ev in events if isinstance(ev, ToolCallEvent)}
        results = [ev.id for ev in events if isinstance(ev, ToolResultEvent)]
        stored = [c["id"] for it in session.get_items() for c in it.get("tool_calls") or []]
        answered = [it["tool_call_id"] for it in session.get_items() if it["kind"] == "tool_result"]
        assert streamed == set(stored) == set(results) == set(answered) and len(stored) == 2
        ids += stored
    assert len(set(ids)) == 4
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids)


async def test_result_says_why_the_last_call_ended(tokenizer) -> None:
    """Orchestration logic with a scripted model: ``finish_reason`` is the answer's call's (``stop`` at eos,
    ``length`` when ``max_tokens`` cut it), so ``loom chat`` can mark a cut reply."""
    ended = await Agent(ScriptedLLM(tokenizer, ["Paris."])).arun("Capital of France?")
    assert ended.final_state == "done" and ended.finish_reason == "stop"
    cut = await Agent(ScriptedLLM(tokenizer, ["Paris is the capital and largest city of France."]),
                      budget=ContextBudget(reserved_output=3)).arun("Capital of France?")
    assert cut.final_state == "done" and cut.finish_reason == "length" and cut.usage.completion_tokens == 3


async def test_a_turn_refused_before_its_first_model_call_leaves_the_session_as_it_was(tokenizer, tmp_path) -> None:
    """Scripted model, real tokenizer and SQL session: a message too long for the window is a
    ContextLengthError, and neither it nor anything else of that turn stays in the history."""
    from loom.runtime.errors import ContextLengthError

    url = f"sqlite:///{tmp_path}/s.db"
    llm = ScriptedLLM(tokenizer, ["first answer", "second answer"], max_model_len=512)
    agent = Agent(llm, system_prompt="sys")
    await agent.arun("hello", session=SQLSession("u1", url=url))
    before = SQLSession("u1", url=url).get_items()
    with pytest.raises(ContextLengthError):
        await agent.arun("word " * 2000, session=SQLSession("u1", url=url))
    assert SQLSession("u1", url=url).get_items() == before
    after = await agent.arun("again", session=SQLSession("u1", url=url))
    assert after.final_state == "done" and after.answer == "second answer"


async def test_a_10kb_tool_result_in_a_1024_token_window_is_cut_with_a_marker_and_the_turn_answers(tokenizer
                                                                                                  ) -> None:
    """Scripted model, real tokenizer: the result cap follows the window (half the prompt limit here), so the
    result fits the next call's prompt, cut with a visible note, instead of failing the turn."""
    @tool
    def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: where.
        """
        return "lorem ipsum dolor sit amet " * 400  # about 10 kB

    llm = ScriptedLLM(tokenizer, [call("fetch", '{"url": "x"}'), "It is lorem ipsum."], max_model_len=1024)
    agent = Agent(llm, tools=[fetch], budget=ContextBudget(reserved_output=128))
    result = await agent.arun("what does the page say?")
    assert result.final_state == "done" and result.answer == "It is lorem ipsum."
    assert agent.parts.budget.tool_result_cap == (1024 - 128) // 2
    shown = tokenizer.decode(llm.prompts[1])
    assert "[truncated:" in shown and len(llm.prompts[1]) <= 1024 - 128


def test_caps_follow_a_small_window_and_keep_their_settings_in_a_large_one() -> None:
    small, large = ContextBudget(max_model_len=1024), ContextBudget(max_model_len=32768)
    assert (small.retrieval_cap, small.tool_result_cap, small.memory_cap) == (384, 384, 192)
    assert (large.retrieval_cap, large.tool_result_cap, large.memory_cap) == (1024, 1024, 256)


def test_an_answer_step_keeps_a_reasoning_models_think_block_and_a_callers_grammar() -> None:
    """``answer_only``: the open marker always stops the answer; the first-character grammar only where nothing else
    shapes the reply (a reasoning format opens with ``<think>``; a caller's own ``structured_output`` wins)."""
    import dataclasses

    from loom.orchestrator.formats.format import HERMES
    from loom.orchestrator.runner import answer_only
    from loom.runtime.sampling_params import SamplingParams
    from loom.runtime.structured_output import StructuredOutputParams

    plain = answer_only(SamplingParams(), HERMES)
    assert plain.structured_output.regex == ANSWER_REGEX and plain.stop == ["<tool_call>"]
    thinking = answer_only(SamplingParams(), dataclasses.replace(HERMES, reasoning=True))
    assert thinking.structured_output is None and thinking.stop == ["<tool_call>"]
    schema = StructuredOutputParams(json={"type": "object"})
    assert answer_only(SamplingParams(structured_output=schema), HERMES).structured_output is schema


async def test_a_reply_ends_at_its_first_repeated_call_and_the_repeat_is_neither_run_nor_stored(tokenizer) -> None:
    """Orchestration logic with a scripted model: the third call repeats the first, so the reply stops there
    (the fourth, another tool, never comes) and the stored reply ends after the second call."""
    from loom.orchestrator.events import ToolCallEvent

    add, runs = _recording_add()

    @tool
    def echo(text: str) -> str:
        """Echo text.

        Args:
            text: what to echo.
        """
        return text

    calls = [call("add", '{"a": 1, "b": 2}'), call("add", '{"a": 3, "b": 4}'), call("add", '{"a": 1, "b": 2}'),
             call("echo", '{"text": "never"}')]
    llm = ScriptedLLM(tokenizer, ["\n".join(calls), "3 and 7."])
    session = InMemorySession()
    events = [ev async for ev in Agent(llm, tools=[add, echo]).stream("add twice", session=session)]
    assert runs == [(1, 2), (3, 4)]
    streamed = {ev.index for ev in events if isinstance(ev, ToolCallEvent)}
    assert streamed == {0, 1}  # nothing of the repeat (index 2) reached the stream
    reply = next(it for it in session.get_items() if it["kind"] == "assistant")
    assert len(reply["tool_calls"]) == 2
    text = tokenizer.decode(reply["token_ids"])
    assert text.count("<tool_call>") == 2 and "never" not in text


async def test_a_second_call_of_the_same_tool_streams_its_deltas_once_complete(tokenizer) -> None:
    """Orchestration logic with a scripted model: deltas held while a call might repeat are all streamed once it
    is known not to, also when it is the reply's last."""
    add, runs = _recording_add()
    reply = "\n".join([call("add", '{"a": 1, "b": 2}'), call("add", '{"a": 3, "b": 4}')])
    events = [ev async for ev in Agent(ScriptedLLM(tokenizer, [reply, "3 and 7."]), tools=[add]).stream("add twice")]
    deltas = "".join(ev.arguments_delta for ev in events
                     if isinstance(ev, ToolCallEvent) and ev.index == 1 and ev.arguments is None)
    assert runs == [(1, 2), (3, 4)]
    assert deltas.replace(" ", "") == '{"a":3,"b":4}', deltas
