"""Shaping engine output into OpenAI objects, from scripted ``RequestOutput`` deltas.

Unit tests of the parsing/shaping logic only (no model): each scripted output
carries one token's text, as the engine yields them; the end-to-end paths run
against the real engine in the other test modules.
"""

from __future__ import annotations

import json

from loom.api.serving_chat.run import CompletionRun
from loom.api.serving_chat.prompt import PreparedChat
from loom.runtime.outputs import RequestOutput


def _scripted(pieces: list[str], finish_reason: str = "stop", cached: int = 3) -> list[RequestOutput]:
    outs, ids, text = [], [], ""
    for i, piece in enumerate(pieces):
        ids, text = [*ids, 100 + i], text + piece
        last = i == len(pieces) - 1
        outs.append(RequestOutput(request_id="r", prompt_token_ids=list(range(10)), token_ids=ids, text=text,
                                  new_token_ids=[100 + i], new_text=piece, finished=last,
                                  finish_reason=finish_reason if last else None, num_cached_tokens=cached))
    return outs


def _run(pieces: list[str], forced: bool = False, parse_tools: bool = True, json_output: bool = False) -> CompletionRun:
    run = CompletionRun(PreparedChat(list(range(10)), None, forced, json_output, parse_tools), "m")
    for out in _scripted(pieces):
        run.feed(out)
    return run


def test_reasoning_content_and_exact_reasoning_tokens():
    run = _run(["<think>", "plan", " it", "</think>", "\n\n", "Hello", " there"])
    r = run.result()
    assert r.choices[0].message.reasoning_content == "plan it"
    assert r.choices[0].message.content == "\n\nHello there"
    assert run.output_classes == ["reasoning"] * 4 + ["output"] * 3
    assert r.usage.completion_tokens_details.reasoning_tokens == 4
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.prompt_tokens_details.cached_tokens) == (10, 7, 3)


def test_tool_call_block_becomes_tool_calls_with_finish_reason_tool_calls():
    run = _run(["Sure.", "<tool_call>", '\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}', "\n",
                "</tool_call>"])
    r = run.result()
    (call,) = r.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.content == "Sure."
    assert run.output_classes == ["output"] + ["tool_call"] * 5


def test_forced_call_streams_name_then_arguments_that_join_to_valid_json():
    run = CompletionRun(PreparedChat([1, 2], None, True, False, False), "m")
    pieces = ["<tool_call>", '\n{"name": "f", "arguments": ', '{"x": ', "1}", "}\n", "</tool_call>"]
    deltas = [run.to_delta(run.feed(o)) for o in _scripted(pieces)]
    calls = [tc for d in deltas if d is not None for tc in (d.tool_calls or [])]
    assert calls[0].function.name == "f" and calls[0].id.startswith("call_")
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"x": 1}
    assert run.finish_reason() == "tool_calls"


def test_malformed_tool_call_stays_content_not_a_call():
    r = _run(["<tool_call>", "not json", "</tool_call>"]).result()
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content == "<tool_call>not json</tool_call>"
    assert r.choices[0].finish_reason == "stop"


def test_tool_choice_none_keeps_tool_call_text_as_content():
    r = _run(["<tool_call>", '{"name": "f", "arguments": {}}', "</tool_call>"], parse_tools=False).result()
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content == '<tool_call>{"name": "f", "arguments": {}}</tool_call>'


def test_json_output_is_all_content():
    run = _run(['{"ok"', ": true}"], parse_tools=False, json_output=True)
    r = run.result()
    assert r.choices[0].message.content == '{"ok": true}' and r.usage.completion_tokens_details.reasoning_tokens == 0
