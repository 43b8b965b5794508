"""The grammar of a forced tool call: compiles with llguidance, accepts the template's own rendering only."""

from __future__ import annotations

from loom.orchestrator.formats import bound_schema, detect_format, forced_call_grammar
from loom.runtime.structured_output import GrammarBackend, StructuredOutputParams

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "echo", "description": "Echo.", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]


_BACKENDS: dict[int, GrammarBackend] = {}


def _accepts(tokenizer, grammar: str, text: str) -> bool:
    if id(tokenizer) not in _BACKENDS:
        _BACKENDS[id(tokenizer)] = GrammarBackend(tokenizer)
    backend = _BACKENDS[id(tokenizer)]
    matcher = backend.matcher(backend.compile(StructuredOutputParams(grammar=grammar)))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return matcher.accept_tokens(ids) and matcher.is_terminated


def test_forced_grammar_accepts_the_template_rendering_of_a_call(tokenizer) -> None:
    grammar = forced_call_grammar(detect_format(tokenizer), TOOLS, bound=True)
    rendered = tokenizer.apply_chat_template(
        [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]}],
        tokenize=False)
    block = rendered[len("<|im_start|>assistant\n"):-len("<|im_end|>\n")]
    assert _accepts(tokenizer, grammar, block)
    assert not _accepts(tokenizer, grammar, '<tool_call>\n{"name":"add","arguments":{"a":1,"b":2}}\n</tool_call>')
    assert not _accepts(tokenizer, grammar, '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>')


def test_a_forced_number_may_be_written_in_exponent_notation(tokenizer) -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "", "parameters": {
        "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}}]
    grammar = forced_call_grammar(detect_format(tokenizer), tools, bound=True)
    for x in ("8.854e-12", "1e9", "-0.25", "2E+3"):
        assert _accepts(tokenizer, grammar, '<tool_call>\n{"name": "f", "arguments": {"x": %s}}\n</tool_call>' % x)


def test_named_choice_allows_only_that_tool(tokenizer) -> None:
    grammar = forced_call_grammar(detect_format(tokenizer), TOOLS, "echo", bound=True)
    assert _accepts(tokenizer, grammar, '<tool_call>\n{"name": "echo", "arguments": {"text": "hi"}}\n</tool_call>')
    assert not _accepts(tokenizer, grammar, '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')


def test_unbounded_scalars_are_bounded_and_explicit_bounds_kept() -> None:
    s = bound_schema({"type": "object", "properties": {
        "n": {"type": "integer"}, "m": {"type": "integer", "maximum": 5}, "t": {"type": "string"},
        "u": {"type": "string", "enum": ["x"]}, "x": {"type": "number"}, "a": {"type": "array"},
        "b": {"type": "array", "maxItems": 40}}})
    p = s["properties"]
    assert (p["n"]["minimum"], p["n"]["maximum"]) == (-10**9, 10**9)
    assert p["x"] == {"type": "number"}  # a bounded number could not be written 8.854e-12
    assert p["a"]["maxItems"] == 16 and p["b"]["maxItems"] == 40
    assert p["m"]["maximum"] == 5 and p["m"]["minimum"] == -10**9
    assert p["t"]["maxLength"] == 128 and p["t"]["minLength"] == 1 and "maxLength" not in p["u"]


def test_objects_that_declare_properties_are_closed_and_free_form_ones_stay_open() -> None:
    s = bound_schema({"type": "object", "properties": {"o": {"type": "object", "properties": {}},
                                                        "free": {"type": "object"},
                                                        "open": {"type": "object", "properties": {},
                                                                 "additionalProperties": True}}})
    assert s["additionalProperties"] is False and s["properties"]["o"]["additionalProperties"] is False
    assert "additionalProperties" not in s["properties"]["free"]
    assert s["properties"]["open"]["additionalProperties"] is True


def test_a_forced_call_of_a_tool_without_parameters_takes_empty_arguments_only(tokenizer) -> None:
    tools = [{"type": "function", "function": {"name": "die", "description": "Exit.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    grammar = forced_call_grammar(detect_format(tokenizer), tools, "die", bound=True)
    assert _accepts(tokenizer, grammar, '<tool_call>\n{"name": "die", "arguments": {}}\n</tool_call>')
    assert not _accepts(tokenizer, grammar, '<tool_call>\n{"name": "die", "arguments": {"type": "x"}}\n</tool_call>')
