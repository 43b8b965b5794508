"""Fact extraction: the rule-based extractor, and LLMExtractor driven by a scripted stand-in model."""

from __future__ import annotations

import json

import pytest

from loom.memory import EventType, ForgetRequest, LLMExtractor, RuleBasedExtractor, facts_schema, parse_facts


def user(text: str) -> dict:
    return {"role": "user", "content": text}


@pytest.mark.parametrize(
    ("said", "facts"),
    [
        ("Hi! My name is Ada and I live in Paris.", ["User's name is Ada", "User lives in Paris"]),
        ("remember that my dog's name is Rex", ["User's dog's name is Rex"]),
        ("Please remember: I hate olives", ["User hates olives"]),
        ("Remember that the release is on Friday.", ["The release is on Friday"]),
        ("My favourite color is blue, what's yours?", ["User's favourite color is blue"]),
        ("I prefer tabs over spaces.", ["User prefers tabs over spaces"]),
        ("I'm 31 years old", ["User is 31 years old"]),
        ("I work at CERN. I am allergic to penicillin", ["User works at CERN", "User is allergic to penicillin"]),
        ("I just moved to Lyon last week", ["User lives in Lyon"]),
        ("What is my name?", []),
        ("I like that idea, thanks", []),
    ],
)
def test_rule_based_extractor_reads_explicit_statements(said, facts):
    assert RuleBasedExtractor().extract([user(said)]) == facts


def test_rule_based_extractor_ignores_assistant_and_reads_content_parts():
    messages = [
        {"role": "system", "content": "My name is System."},
        {"role": "assistant", "content": "My name is Loom."},
        {"role": "user", "content": [{"type": "text", "text": "My name is Ada."}]},
    ]
    assert RuleBasedExtractor().extract(messages) == ["User's name is Ada"]


def test_rule_based_extractor_rejects_messages_without_role():
    with pytest.raises(ValueError, match="messages"):
        RuleBasedExtractor().extract([{"content": "My name is Ada"}])


class ScriptedModel:
    """Stand-in for the engine in these unit tests: returns scripted answers and records prompts."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, prompt: str, json_schema: dict) -> str:
        self.calls.append((prompt, json_schema))
        return self.answers.pop(0)


def test_llm_extractor_sends_conversation_and_schema_and_parses_facts():
    model = ScriptedModel(json.dumps({"facts": ["User's name is Ada", " User lives in Paris ", "User's name is Ada"]}))
    turn = [user("hey, I'm Ada, living in Paris these days"), {"role": "assistant", "content": "Nice to meet you!"}]
    facts = LLMExtractor(model).extract(turn)
    assert facts == ["User's name is Ada", "User lives in Paris"]
    prompt, schema = model.calls[0]
    assert "user: hey, I'm Ada, living in Paris these days" in prompt
    assert "assistant: Nice to meet you!" in prompt
    assert schema == facts_schema(20)


def test_llm_extractor_falls_back_to_rules_on_invalid_output():
    model = ScriptedModel("Sure! The user is Ada.")
    assert LLMExtractor(model).extract([user("My name is Ada")]) == ["User's name is Ada"]


def test_llm_extractor_strict_raises_on_invalid_output():
    with pytest.raises(ValueError, match="extractor"):
        LLMExtractor(ScriptedModel('{"facts": "Ada"}'), strict=True).extract([user("hi")])


def test_llm_extractor_caps_the_number_of_facts():
    model = ScriptedModel(json.dumps([f"User fact {i}" for i in range(5)]))
    assert LLMExtractor(model, max_facts=2).extract([user("hi")]) == ["User fact 0", "User fact 1"]


def test_parse_facts_accepts_list_and_objects():
    assert parse_facts('[{"text": "a"}, {"fact": "b"}, "c"]') == ["a", "b", "c"]
    with pytest.raises(ValueError, match="extractor"):
        parse_facts("[1, 2]")


def test_memory_add_with_llm_extractor_writes_its_facts(make_memory):
    model = ScriptedModel(
        json.dumps({"facts": ["User's name is Ada", "User lives in Paris"]}),
        json.dumps({"facts": ["User lives in Lyon"]}),
    )
    mem = make_memory(extractor=LLMExtractor(model))
    first = mem.add([user("I'm Ada, from Paris")], "u1", source=("s1", 0))
    assert [(e.event, e.text) for e in first] == [
        (EventType.ADD, "User's name is Ada"), (EventType.ADD, "User lives in Paris")]
    moved = mem.add([user("I moved to Lyon last week")], "u1", source=("s1", 1))
    assert [(e.event, e.reason, e.previous_id) for e in moved] == [(EventType.UPDATE, "slot:location", first[1].id)]
    assert mem.get(moved[0].id, "u1").source.turn == 1


def test_llm_extractor_on_the_real_engine_with_constrained_decoding(checkpoint_factory, make_memory):
    """A random-weight model writes nonsense, but the schema makes it parseable ``{"facts": [...]}``."""
    from loom.runtime import LLM, SamplingParams
    from loom.runtime.structured_output import StructuredOutputParams

    llm = LLM(str(checkpoint_factory("qwen3", "tiny")))

    def generate(prompt: str, json_schema: dict) -> str:
        ids = llm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                add_generation_prompt=True, return_dict=False)
        # One fact and one forget request of at most 300 characters each: 800 tokens
        # always reach the closing brace.
        params = SamplingParams(temperature=0.0, max_tokens=800,
                                structured_output=StructuredOutputParams(json=json_schema))
        out = llm.generate(prompt_token_ids=[ids], sampling_params=params, use_tqdm=False)[0]
        assert out.finish_reason == "stop"
        return out.text

    extractor = LLMExtractor(generate, max_facts=1, strict=True)
    facts = extractor.extract([user("My name is Ada and I live in Paris.")])
    kept = [f for f in facts if not isinstance(f, ForgetRequest)]
    assert len(kept) <= 1 and len(facts) - len(kept) <= 1
    assert all(isinstance(f, str) and 0 < len(f) <= 300 for f in facts)
    mem = make_memory(extractor=extractor)
    events = mem.add([user("My name is Ada and I live in Paris.")], "u1")
    # Greedy: the same answer again; its fact is stored as given (a forget request may delete it again).
    assert [e.text for e in events if e.event is EventType.ADD] == kept
    assert {e.event for e in events} <= {EventType.ADD, EventType.DELETE}


@pytest.mark.parametrize(
    ("said", "request_text"),
    [
        ("Please forget that I live in Paris.", "User lives in Paris"),
        ("forget my address", "My address"),
        ("Forget about the meeting on Monday", "The meeting on Monday"),
    ],
)
def test_rule_based_extractor_turns_forget_statements_into_forget_requests(said, request_text):
    [request] = RuleBasedExtractor().extract([user(said)])
    assert isinstance(request, ForgetRequest) and request == request_text


def test_dont_forget_is_a_remember_request():
    [fact] = RuleBasedExtractor().extract([user("Don't forget that I love jazz")])
    assert fact == "User loves jazz" and not isinstance(fact, ForgetRequest)


def test_forget_statement_deletes_the_named_memory_with_history(make_memory):
    mem = make_memory()
    old = mem.add("User lives in Paris", "u1")[0]
    new = mem.add([user("I moved to Lyon")], "u1")[0]
    other = mem.add("User plays the cello", "u1")[0]
    events = mem.add([user("Please forget where I live. Forget that I live in Lyon.")], "u1")
    assert [(e.event, e.id, e.reason) for e in events] == [
        (EventType.DELETE, new.id, "forget"), (EventType.DELETE, old.id, "forget")]
    assert [m.id for m in mem.list("u1", include_inactive=True)] == [other.id]


def test_forget_by_subject_and_unmatched_forget_requests(make_memory):
    mem = make_memory()
    addr = mem.add("My address is 12 Baker Street", "u1")[0]
    mem.add("My address is 12 Baker Street", "u2")
    assert mem.add([user("forget my favourite colour")], "u1") == []  # nothing of that kind stored
    events = mem.add([user("Forget my address!")], "u1")
    assert [(e.event, e.id) for e in events] == [(EventType.DELETE, addr.id)]
    assert mem.list("u1") == []
    assert [m.text for m in mem.list("u2")] == ["My address is 12 Baker Street"]  # other namespace kept


def test_llm_extractor_forget_list_becomes_delete(make_memory):
    model = ScriptedModel(json.dumps({"facts": ["User lives in Paris"]}),
                          json.dumps({"facts": [], "forget": ["User lives in Paris"]}))
    mem = make_memory(extractor=LLMExtractor(model))
    added = mem.add([user("I live in Paris")], "u1")[0]
    events = mem.add([user("Actually, forget where I live")], "u1")
    assert [(e.event, e.id, e.reason) for e in events] == [(EventType.DELETE, added.id, "forget")]
