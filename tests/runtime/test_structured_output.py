"""Grammar-constrained decoding with llguidance through the real Loom tokenizer.

Generations here are driven by seeded random logits (the worst case a model
can be: no preference for valid text), masked by the matcher and sampled; the
engine-level tests drive the same matcher from a random-weight model.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch

from loom.runtime.structured_output import (
    GrammarBackend,
    StructuredOutputParams,
    allocate_bitmask,
    apply_bitmask_,
    bitmask_to_bool,
    tool_call_schema,
)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "address"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99999},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 9},
                    "unit": {"enum": ["kg", "pcs", "box"]},
                },
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "status": {"enum": ["open", "paid", "shipped"]},
        "note": {"type": ["string", "null"], "maxLength": 8},
    },
    "required": ["id", "items", "status"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {
        "name": "search_documents", "description": "Search the docs.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "maxLength": 16},
            "k": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate arithmetic.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "maxLength": 12}},
            "required": ["expression"], "additionalProperties": False}}},
]
SCHEMAS = [PERSON, ORDER, tool_call_schema(TOOLS)]
REGEX = r"(yes|no|maybe) [0-9]{1,3}(\.[0-9]{2})? [a-z]{2,6}"
LARK = r"""
start: greeting " " NAME "!" (" " mood)?
greeting: "hello" | "hi" | "good " ("morning" | "evening")
mood: ":)" | ":(" | ";)"
NAME: /[A-Z][a-z]{1,8}/
"""
LARK_EQUIV = re.compile(r"(hello|hi|good (morning|evening)) [A-Z][a-z]{1,8}!( (:\)|:\(|;\)))?")


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3"))


@pytest.fixture(scope="module")
def backend(tokenizer) -> GrammarBackend:
    return GrammarBackend(tokenizer, vocab_size=len(tokenizer))


def _generate(backend: GrammarBackend, params: StructuredOutputParams, gen: torch.Generator,
              max_tokens: int = 200) -> tuple[list[int], bool]:
    matcher = backend.matcher(backend.compile(params))
    mask = allocate_bitmask(1, backend.vocab_size)
    out: list[int] = []
    for _ in range(max_tokens):
        matcher.fill_bitmask(mask, 0)
        logits = apply_bitmask_(torch.randn(1, backend.vocab_size, generator=gen), mask)
        tok = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
        assert matcher.accept_tokens([tok])
        out.append(tok)
        if matcher.is_terminated:
            return out, True
    return out, False


def _text(tokenizer, ids: list[int]) -> str:
    assert ids[-1] == tokenizer.eos_token_id
    return tokenizer.decode(ids[:-1])


def test_200_random_logit_generations_parse_and_validate(backend, tokenizer) -> None:
    gen = torch.Generator().manual_seed(0)
    kinds = {"json": 0, "regex": 0, "grammar": 0}
    for i in range(200):
        which = i % 5
        if which < 3:
            schema = SCHEMAS[which]
            ids, done = _generate(backend, StructuredOutputParams(json=schema), gen)
            assert done, f"generation {i} did not finish: {tokenizer.decode(ids)!r}"
            jsonschema.validate(json.loads(_text(tokenizer, ids)), schema)
            kinds["json"] += 1
        elif which == 3:
            ids, done = _generate(backend, StructuredOutputParams(regex=REGEX), gen)
            assert done and re.fullmatch(REGEX, _text(tokenizer, ids)), tokenizer.decode(ids)
            kinds["regex"] += 1
        else:
            ids, done = _generate(backend, StructuredOutputParams(grammar=LARK), gen)
            assert done and LARK_EQUIV.fullmatch(_text(tokenizer, ids)), tokenizer.decode(ids)
            kinds["grammar"] += 1
    assert kinds == {"json": 120, "regex": 40, "grammar": 40}


def test_json_object_mode_yields_a_json_object(backend, tokenizer) -> None:
    params = StructuredOutputParams(json_object=True)
    matcher = backend.matcher(backend.compile(params))
    # compact JSON: flexible whitespace would let a model spend its budget on spaces
    spaced = tokenizer.encode('{"a": 1', add_special_tokens=False)
    assert matcher.validate_tokens(spaced) < len(spaced)
    forced = tokenizer.encode('{"a":[1,2],"b":{"c":null}', add_special_tokens=False)
    assert matcher.validate_tokens(forced) == len(forced)
    assert matcher.accept_tokens(forced)
    mask = allocate_bitmask(1, backend.vocab_size)
    matcher.fill_bitmask(mask)
    allowed = bitmask_to_bool(mask, backend.vocab_size)[0].nonzero().flatten().tolist()
    assert tokenizer.encode("}", add_special_tokens=False)[0] in allowed
    assert tokenizer.eos_token_id not in allowed  # object not closed yet


@pytest.mark.parametrize("params, field", [
    (dict(json={"type": "frobnicate"}), "structured_output.json"),
    (dict(json={"properties": {"a": {"$ref": "#/definitions/missing"}}}), "structured_output.json"),
    (dict(regex="([a-z"), "structured_output.regex"),
    (dict(grammar="start: undefined_rule"), "structured_output.grammar"),
])
def test_uncompilable_spec_is_a_value_error_naming_the_field(backend, params, field) -> None:
    with pytest.raises(ValueError, match=field):
        backend.compile(StructuredOutputParams(**params))


@pytest.mark.parametrize("kwargs", [
    {}, {"json": {"type": "object"}, "regex": "a"}, {"json": "{not json"}, {"regex": 5},
])
def test_invalid_params_are_value_errors(kwargs) -> None:
    with pytest.raises(ValueError, match="structured_output"):
        StructuredOutputParams(**kwargs)


def test_compiled_grammars_are_cached_by_canonical_spec(backend) -> None:
    a = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    b = json.dumps({"required": ["x"], "properties": {"x": {"type": "integer"}}, "type": "object"})
    first = backend.compile(StructuredOutputParams(json=a))
    hits = backend.cache_hits
    assert backend.compile(StructuredOutputParams(json=b)) is first
    assert backend.cache_hits == hits + 1


def test_rollback_restores_the_grammar_state(backend, tokenizer) -> None:
    matcher = backend.matcher(backend.compile(StructuredOutputParams(json=ORDER)))
    prefix = tokenizer.encode('{"id":12,"items":[{"sku":"', add_special_tokens=False)
    more = tokenizer.encode('ABC-123","qty":4}],', add_special_tokens=False)
    assert matcher.accept_tokens(prefix)
    before = allocate_bitmask(1, backend.vocab_size)
    matcher.fill_bitmask(before)
    assert matcher.accept_tokens(more)
    matcher.rollback(len(more))
    after = allocate_bitmask(1, backend.vocab_size)
    matcher.fill_bitmask(after)
    assert torch.equal(before, after)
    assert matcher.num_tokens == len(prefix)


def test_drafts_are_cut_at_the_first_token_the_grammar_rejects(backend, tokenizer) -> None:
    matcher = backend.matcher(backend.compile(StructuredOutputParams(regex=r"[0-9]{2}-[a-z]+")))
    good = tokenizer.encode("42-ab", add_special_tokens=False)
    bad = tokenizer.encode("4x", add_special_tokens=False)
    assert matcher.validate_tokens(good + [tokenizer.eos_token_id]) == len(good) + 1
    assert matcher.validate_tokens(bad) < len(bad)
    assert matcher.num_tokens == 0  # validation consumes nothing


def test_masks_for_drafted_positions_equal_sequential_masks(backend, tokenizer) -> None:
    params = StructuredOutputParams(json=tool_call_schema(TOOLS))
    drafts = tokenizer.encode('{"name":"calculator","arguments":{"expression":"1+', add_special_tokens=False)
    spec = backend.matcher(backend.compile(params))
    masks = allocate_bitmask(len(drafts) + 1, backend.vocab_size)
    spec.fill_bitmasks(masks, 0, drafts)
    assert spec.num_tokens == 0
    seq = backend.matcher(backend.compile(params))
    one = allocate_bitmask(1, backend.vocab_size)
    for j in range(len(drafts) + 1):
        seq.fill_bitmask(one)
        assert torch.equal(one[0], masks[j]), j
        if j < len(drafts):
            seq.accept_tokens([drafts[j]])


def test_eos_terminates_and_rolls_back(backend, tokenizer) -> None:
    matcher = backend.matcher(backend.compile(StructuredOutputParams(regex="ok")))
    ids = tokenizer.encode("ok", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    assert matcher.accept_tokens(ids + [eos]) and matcher.is_terminated
    mask = allocate_bitmask(1, backend.vocab_size)
    matcher.fill_bitmask(mask)
    assert bitmask_to_bool(mask, backend.vocab_size)[0].nonzero().flatten().tolist() == [eos]
    matcher.rollback(1)
    assert not matcher.is_terminated and matcher.num_tokens == len(ids)
    matcher.rollback(len(ids))
    assert matcher.validate_tokens(ids) == len(ids)


def test_tool_call_schema_restricts_to_named_tool() -> None:
    both = tool_call_schema(TOOLS)
    assert [b["properties"]["name"]["const"] for b in both["anyOf"]] == [
        "search_documents", "calculator"]
    one = tool_call_schema(TOOLS, name="calculator")
    assert one["properties"]["name"] == {"const": "calculator"}
    assert one["properties"]["arguments"] == TOOLS[1]["function"]["parameters"]
    jsonschema.validate({"name": "calculator", "arguments": {"expression": "1+1"}}, both)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "calculator", "arguments": {"query": "x"}}, both)
    with pytest.raises(ValueError, match="tool_choice"):
        tool_call_schema(TOOLS, name="nope")
    with pytest.raises(ValueError, match="tools"):
        tool_call_schema([])


def _pydantic_tools() -> list[dict]:
    """Tools whose parameters Pydantic wrote: ``$defs`` with ``$ref``s, one of them recursive."""
    from tests.pydantic_models import Customer, Node

    return [{"type": "function", "function": {"name": m.__name__.lower(), "parameters": m.model_json_schema()}}
            for m in (Customer, Node)]


@pytest.mark.parametrize("name", [None, "customer", "node"])
def test_a_forced_tool_call_accepts_parameters_with_defs_and_refs_and_writes_valid_arguments(backend, tokenizer,
                                                                                             name) -> None:
    tools = _pydantic_tools()
    schema = tool_call_schema(tools, name=name)
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    gen = torch.Generator().manual_seed(1)
    finished = 0
    for _ in range(20):
        ids, done = _generate(backend, StructuredOutputParams(json=schema), gen, max_tokens=400)
        if not done:
            continue
        finished += 1
        call = json.loads(_text(tokenizer, ids))
        assert name is None or call["name"] == name
        jsonschema.validate(call["arguments"], params[call["name"]])  # the user's own schema, $refs and all
    assert finished >= 5


def test_a_forced_call_carries_only_the_properties_its_tool_declares() -> None:
    declared = {"type": "object", "properties": {"city": {"type": "string"},
                                                 "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
                                                 "properties": {"type": "string"}},  # a parameter so named
                "required": ["city"]}
    open_ended = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": True}
    tools = [{"type": "function", "function": {"name": "weather", "parameters": declared}},
             {"type": "function", "function": {"name": "anything", "parameters": open_ended}}]
    args = tool_call_schema(tools, name="weather")["properties"]["arguments"]
    assert args["additionalProperties"] is False and args["properties"]["where"]["additionalProperties"] is False
    assert "additionalProperties" not in args["properties"]["properties"]  # a property's name is not a schema
    assert tool_call_schema(tools, name="anything")["properties"]["arguments"]["additionalProperties"] is True
    assert "additionalProperties" not in declared  # the caller's schema is not changed
    with pytest.raises(jsonschema.ValidationError):  # what SmolLM2 wrote before: the grammar no longer admits it
        jsonschema.validate({"city": "Oslo", "properties": "x", "required": ["city"]}, args)
