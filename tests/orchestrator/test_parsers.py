"""Streaming parser: reasoning / content / tool calls, fed token by token."""

from __future__ import annotations

import json

import pytest

from loom.runtime.detokenizer import IncrementalDetokenizer
from loom.runtime.sampling_params import SamplingParams
from loom.orchestrator.parsers import StreamingParser, parse_tool_block

REPLY = ('<think>\nadd them\n</think>\n\nSure.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 40}}\n'
         '</tool_call>\n<tool_call>\n{"name": "slow_echo", "arguments": {"text": "hi }"}}\n</tool_call>')


def _feed_all(parser: StreamingParser, deltas: list[str]):
    events = []
    for d in deltas:
        events += parser.feed(d)
    return events + parser.finish()


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
def test_any_chunking_gives_same_split(chunk: int) -> None:
    parser = StreamingParser()
    events = _feed_all(parser, [REPLY[i:i + chunk] for i in range(0, len(REPLY), chunk)])
    assert parser.reasoning == "\nadd them\n"
    assert parser.content == "\n\nSure.\n\n"
    assert [(c.name, c.arguments, c.error) for c in parser.calls] == [
        ("add", {"a": 2, "b": 40}, None), ("slow_echo", {"text": "hi }"}, None)]
    assert "".join(e.text for e in events if e.kind == "reasoning") == parser.reasoning
    assert "".join(e.text for e in events if e.kind == "content") == parser.content
    for i, raw in enumerate(['{"a": 2, "b": 40}', '{"text": "hi }"}']):
        deltas = [e for e in events if e.kind == "tool_call_delta" and e.index == i]
        assert "".join(e.arguments_delta for e in deltas) == raw
        assert [e.name for e in deltas if e.name] == [parser.calls[i].name]


def test_token_by_token_with_real_tokenizer(tokenizer) -> None:
    ids = tokenizer(REPLY, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tokenizer.backend_tokenizer, [], SamplingParams(skip_special_tokens=False))
    parser = StreamingParser()
    states = []
    for tid in ids:
        detok.add_token(tid)
        parser.feed(detok.delta(finished=False))
        states.append(parser.state)
    parser.feed(detok.delta(finished=True))
    parser.finish()
    assert tokenizer.convert_tokens_to_ids("<think>") in ids  # markers are single tokens
    assert len(parser.calls) == 2 and parser.reasoning == "\nadd them\n"
    assert states[0] == "reasoning" and "tool_call" in states


def test_malformed_tool_call_is_an_error_not_an_exception() -> None:
    parser = StreamingParser()
    _feed_all(parser, ["<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,,}}\n</tool_call>"])
    (call,) = parser.calls
    assert call.error and "not valid JSON" in call.error and call.arguments == {}


def test_unclosed_tool_call_block_is_reported() -> None:
    parser = StreamingParser()
    _feed_all(parser, ['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}'])
    (call,) = parser.calls
    assert call.name == "add" and call.error == "tool call block was not closed with </tool_call>"


@pytest.mark.parametrize("tail", ["", '\n{"name": "add", "argu'])
def test_a_block_cut_off_at_max_tokens_says_so_after_the_closed_calls(tail: str) -> None:
    parser = StreamingParser()
    for piece in ['<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>', tail]:
        parser.feed(piece)
    parser.finish(cut_off=True)
    first, cut = parser.calls
    assert first.error is None and first.arguments == {"a": 1}
    assert cut.error == "tool call was cut off at max_tokens"


def test_tool_parsing_off_keeps_text_as_content() -> None:
    parser = StreamingParser(parse_tools=False)
    _feed_all(parser, ["a<tool_call>b</tool_call>"])
    assert parser.content == "a<tool_call>b</tool_call>" and parser.calls == []


def test_partial_marker_that_never_completes_is_flushed_as_content() -> None:
    parser = StreamingParser()
    events = _feed_all(parser, ["x <thi"])
    assert parser.content == "x <thi" and "".join(e.text for e in events) == "x <thi"


@pytest.mark.parametrize("raw,error", [
    ('["add"]', 'tool call must be a JSON object with a string "name"'),
    ('{"name": "add", "arguments": 3}', '"arguments" must be a JSON object'),
    ('{"name": "add", "arguments": "{\\"a\\": 1}"}', None),
])
def test_parse_tool_block_shapes(raw: str, error: str | None) -> None:
    call = parse_tool_block(0, raw)
    assert call.error == error
    if error is None:
        assert call.arguments == {"a": 1} and json.loads(raw)["name"] == call.name


def test_a_reply_that_is_only_a_call_object_for_a_known_tool_is_a_call() -> None:
    parser = StreamingParser(tool_names=frozenset({"get_weather"}))
    events = _feed_all(parser, ['{"name": "get_weather", ', '"arguments": {"city": "Paris"}}'])
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    assert parser.content == "" and not [e for e in events if e.kind == "content"]


@pytest.mark.parametrize("reply", ['{"name": "other", "arguments": {}}', '{"a": 1} is a dict', 'x {"name": "get_weather"}'])
def test_json_that_is_not_a_known_tool_call_stays_content(reply: str) -> None:
    parser = StreamingParser(tool_names=frozenset({"get_weather"}))
    events = _feed_all(parser, [reply[i:i + 5] for i in range(0, len(reply), 5)])
    assert parser.calls == [] and parser.content == reply
    assert "".join(e.text for e in events if e.kind == "content") == reply


def test_a_fenced_json_call_for_a_known_tool_is_a_call() -> None:
    reply = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
    parser = StreamingParser(tool_names=frozenset({"get_weather"}))
    _feed_all(parser, [reply[i:i + 3] for i in range(0, len(reply), 3)])
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    assert parser.content == ""


def test_a_code_answer_streams_as_soon_as_it_cannot_be_a_call() -> None:
    parser = StreamingParser(tool_names=frozenset({"get_weather"}))
    events = parser.feed("```python\n")
    assert "".join(e.text for e in events if e.kind == "content") == "```python\n"  # released, not held
    events = parser.feed("def f(): pass\n```") + parser.finish()
    assert parser.calls == [] and parser.content == "```python\ndef f(): pass\n```"


@pytest.mark.parametrize("head,expected", [
    ("", None), ("``", None), ("```js", None), ("```json\n{", None), ('{"na', None), ('{"name": "get_w', None),
    ('{"name": "get_weather"', True), ('{"name": "other"', False), ('{"a": 1}', False), ("Sure", False),
    ("```python", False)])
def test_bare_call_head_decides_as_early_as_it_can(head: str, expected) -> None:
    from loom.orchestrator.formats.bare import bare_call_head

    assert bare_call_head(head, frozenset({"get_weather"})) is expected


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_a_copied_tool_result_open_tag_is_dropped_from_content(chunk: int) -> None:
    reply = "<tool_response>\nSunny, 21 C in Paris."
    parser = StreamingParser()
    events = _feed_all(parser, [reply[i:i + chunk] for i in range(0, len(reply), chunk)])
    assert parser.content == "\nSunny, 21 C in Paris." and not parser.calls
    assert "".join(e.text for e in events if e.kind == "content") == parser.content


def test_with_tool_parsing_off_a_tool_result_tag_is_plain_content() -> None:
    parser = StreamingParser(parse_tools=False)
    _feed_all(parser, ["<tool_response>\n144"])
    assert parser.content == "<tool_response>\n144"


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_a_close_marker_inside_a_string_argument_is_that_string_not_the_end_of_the_call(chunk: int) -> None:
    # SmolLM2's </tool_call> is plain text, so a (forced) string argument can contain it (BFCL parallel_24)
    reply = ('<tool_call>\n{"name": "slow_echo", "arguments": {"text": "a \\"q\\" }}</tool_call> b"}}\n</tool_call>'
             'after')
    parser = StreamingParser()
    _feed_all(parser, [reply[i:i + chunk] for i in range(0, len(reply), chunk)])
    assert [(c.name, c.arguments, c.error) for c in parser.calls] == [
        ("slow_echo", {"text": 'a "q" }}</tool_call> b'}, None)]
    assert parser.content == "after"
