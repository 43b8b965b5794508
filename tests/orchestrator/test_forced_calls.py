"""Several forced calls in one reply (``parallel=True``): accepted in the model's format, one call otherwise."""

from __future__ import annotations

from loom.orchestrator.formats import FORMATS, detect_format, forced_call_grammar
from tests.orchestrator.test_forced_tool_grammar import TOOLS, _accepts

ADD = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
ECHO = '{"name": "echo", "arguments": {"text": "hi"}}'


def test_hermes_parallel_grammar_accepts_two_blocks_and_the_default_only_one(tokenizer) -> None:
    fmt = detect_format(tokenizer)
    one, many = forced_call_grammar(fmt, TOOLS), forced_call_grammar(fmt, TOOLS, parallel=True)
    two = f"<tool_call>\n{ADD}\n</tool_call>\n<tool_call>\n{ECHO}\n</tool_call>"
    assert _accepts(tokenizer, many, two)
    assert _accepts(tokenizer, many, f"<tool_call>\n{ADD}\n</tool_call>")
    assert not _accepts(tokenizer, one, two)
    assert not _accepts(tokenizer, many, f"<tool_call>\n{ADD}\n</tool_call>\n<tool_call>\n{{\"name\": \"x\"}}")


def test_mistral_parallel_grammar_accepts_a_list_of_calls(tokenizer) -> None:
    fmt = FORMATS["mistral"]
    many = forced_call_grammar(fmt, TOOLS, parallel=True)
    assert _accepts(tokenizer, many, f"[TOOL_CALLS] [{ADD},{ECHO}]")
    assert not _accepts(tokenizer, forced_call_grammar(fmt, TOOLS), f"[TOOL_CALLS] [{ADD},{ECHO}]")
    assert not _accepts(tokenizer, many, f"[TOOL_CALLS] [{ADD},]")


def test_llama3_json_stays_at_one_call(tokenizer) -> None:
    fmt = FORMATS["llama3_json"]
    assert forced_call_grammar(fmt, TOOLS, parallel=True) == forced_call_grammar(fmt, TOOLS)


def test_a_newline_after_the_last_parallel_block_still_lets_the_reply_end(tokenizer) -> None:
    # Hermes templates join calls with a newline: a model writing one must not be trapped into another call
    many = forced_call_grammar(detect_format(tokenizer), TOOLS, parallel=True)
    assert _accepts(tokenizer, many, f"<tool_call>\n{ADD}\n</tool_call>\n")
    assert not _accepts(tokenizer, many, f"<tool_call>\n{ADD}\n</tool_call>\n\n")
