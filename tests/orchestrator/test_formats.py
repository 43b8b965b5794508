"""Tool-call formats: detected from real chat templates, and for each one the parser, the
template view and the forced-call grammar agree (a call written as the format writes it is
parsed back exactly and accepted by the grammar; another tool's call is not).

Templates: SmolLM2's (a real model's, no tool support), Loom's Hermes/Qwen3 template (the
tiny checkpoint's), and two small templates written here in the Llama 3.1 JSON and
Mistral ``[TOOL_CALLS]`` conventions over the tiny checkpoint's tokenizer."""

from __future__ import annotations

import copy
import json

import pytest
from transformers import AutoTokenizer

from loom.orchestrator.formats import detect_format, forced_call_grammar
from loom.orchestrator.parsers import StreamingParser
from loom.runtime.structured_output import GrammarBackend, StructuredOutputParams

TOOLS = [{"type": "function", "function": {"name": "web_search", "description": "Search the web.", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}}]

LLAMA_STYLE = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{% if m.role == 'system' and tools %}Respond in the format {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}.\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", \"parameters\": "
    "{{ c.function.arguments | tojson }}}{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
MISTRAL_STYLE = (
    "{% for m in messages %}{% if m.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS]"
    "{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]"
    "{% elif m.tool_calls %}[TOOL_CALLS] {{ m.tool_calls | map(attribute='function') | list | tojson }}<|im_end|>"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
    "{% else %}{{ m.content }}<|im_end|>{% endif %}{% endfor %}")


@pytest.fixture(scope="module")
def smol(real_model):
    return AutoTokenizer.from_pretrained(str(real_model))


def _with_template(tokenizer, template: str, special: tuple[str, ...] = ()):
    tok = copy.deepcopy(tokenizer)
    if special:
        tok.add_special_tokens({"additional_special_tokens": list(special)})
    tok.chat_template = template
    return tok


@pytest.fixture(scope="module")
def tokenizers(smol, tokenizer):
    return {
        "default": smol,
        "hermes": tokenizer,
        "llama3_json": _with_template(tokenizer, LLAMA_STYLE),
        "mistral": _with_template(tokenizer, MISTRAL_STYLE, ("[TOOL_CALLS]",)),
    }


def test_each_template_gets_its_family_format(tokenizers):
    fmts = {name: detect_format(tok) for name, tok in tokenizers.items()}
    assert {name: f.name for name, f in fmts.items()} == {n: n for n in tokenizers}
    assert fmts["default"].tools_in_system and not fmts["default"].open_token
    assert not fmts["default"].reasoning  # SmolLM2 has no <think>
    assert fmts["hermes"].open_token and fmts["hermes"].reasoning and not fmts["hermes"].tools_in_system
    assert fmts["mistral"].open_token and fmts["mistral"].array
    assert fmts["llama3_json"].arguments_key == "parameters"


def test_override_keeps_tools_in_system_when_the_template_cannot_render_them(smol):
    fmt = detect_format(smol, "hermes")
    assert fmt.name == "hermes" and fmt.tools_in_system
    with pytest.raises(ValueError, match="unknown format"):
        detect_format(smol, "nope")


def _accepts(tokenizer, grammar: str, text: str) -> bool:
    backend = GrammarBackend(tokenizer)
    matcher = backend.matcher(backend.compile(StructuredOutputParams(grammar=grammar)))
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    return matcher.accept_tokens(tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]) \
        and matcher.is_terminated


@pytest.mark.parametrize("name", ["default", "hermes", "llama3_json", "mistral"])
def test_a_call_round_trips_through_parser_and_grammar(tokenizers, name):
    tok = tokenizers[name]
    fmt = detect_format(tok)
    text = fmt.render_call("web_search", {"query": "os.path.join absolute path"})
    parser = StreamingParser(fmt=fmt)
    events = [e for ch in text for e in parser.feed(ch)] + parser.finish()  # one character at a time
    assert [(c.name, c.arguments, c.error) for c in parser.calls] == [
        ("web_search", {"query": "os.path.join absolute path"}, None)]
    assert parser.content.strip() == ""
    assert [e.name for e in events if e.kind == "tool_call_delta" and e.name] == ["web_search"]
    args = "".join(e.arguments_delta for e in events if e.kind == "tool_call_delta")
    assert json.loads(args) == {"query": "os.path.join absolute path"}
    grammar = forced_call_grammar(fmt, TOOLS)
    assert _accepts(tok, grammar, text)
    assert not _accepts(tok, forced_call_grammar(fmt, TOOLS, "add"), text)


def test_default_format_puts_tools_in_the_system_message_and_calls_in_text(smol):
    fmt = detect_format(smol)
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    msgs, tools = fmt.prepare([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+2?"},
                               {"role": "assistant", "content": "", "tool_calls": [call]},
                               {"role": "tool", "content": "3", "tool_call_id": "c1"}], TOOLS)
    assert tools is None
    assert msgs[0]["content"].startswith("Be brief.\n\n") and '"name": "web_search"' in msgs[0]["content"]
    assert msgs[2] == {"role": "assistant", "content": fmt.render_call("add", {"a": 1, "b": 2})}
    assert msgs[3] == {"role": fmt.tool_role, "content": "<tool_response>\n3\n</tool_response>"}
    text = smol.apply_chat_template(msgs, tokenize=False)
    assert "<tool_call>" in text and "<tool_response>\n3\n</tool_response>" in text


def test_llama3_call_only_counts_at_the_start_of_the_reply():
    from loom.orchestrator.formats import LLAMA3_JSON

    parser = StreamingParser(fmt=LLAMA3_JSON)
    for piece in ["Use a dict like ", '{"a": 1}', " here."]:
        parser.feed(piece)
    parser.finish()
    assert parser.calls == [] and parser.content == 'Use a dict like {"a": 1} here.'


def test_mistral_array_of_two_calls_gives_two_indexed_calls():
    from loom.orchestrator.formats import MISTRAL

    parser = StreamingParser(fmt=MISTRAL)
    text = '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "web_search", ' \
           '"arguments": {"query": "x"}}]'
    events = parser.feed(text) + parser.finish()
    assert [(c.index, c.name) for c in parser.calls] == [(0, "add"), (1, "web_search")]
    assert [(e.index, e.name) for e in events if e.kind == "tool_call_delta" and e.name] == [
        (0, "add"), (1, "web_search")]
