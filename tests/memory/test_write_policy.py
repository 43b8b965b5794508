"""ADD / NOOP / UPDATE decisions with the real MiniLM embedder and a real SQLite file."""

from __future__ import annotations

from loom.memory import EventType


def kinds(events):
    return [(e.event, e.reason) for e in events]


def test_new_fact_is_added_with_source(make_memory):
    mem = make_memory()
    events = mem.add("User likes hiking in the Alps", "u1", source={"session_id": "s-1", "turn": 3})
    assert kinds(events) == [(EventType.ADD, "new")]
    item = mem.get(events[0].id, "u1")
    assert item.text == "User likes hiking in the Alps"
    assert item.active and item.use_count == 0
    assert (item.source.session_id, item.source.turn) == ("s-1", 3)


def test_exact_duplicate_is_noop_and_refreshes_use(make_memory, clock):
    mem = make_memory()
    first = mem.add("User likes cats", "u1")[0]
    clock.advance(60)
    again = mem.add("user likes cats!", "u1")
    assert kinds(again) == [(EventType.NOOP, "exact")]
    assert again[0].id == first.id
    item = mem.get(first.id, "u1")
    assert item.use_count == 1
    assert item.last_used_at == clock()
    assert len(mem.list("u1", include_inactive=True)) == 1


def test_near_duplicate_adding_nothing_new_is_noop(make_memory):
    mem = make_memory()
    first = mem.add("User likes green tea", "u1")[0]
    # cosine ~0.97 and every content word of the new fact is already stored.
    events = mem.add("The user really likes green tea", "u1")
    assert kinds(events) == [(EventType.NOOP, "duplicate")]
    assert events[0].id == first.id


def test_slot_contradiction_supersedes_and_keeps_history(make_memory):
    mem = make_memory()
    ada = mem.add("My name is Ada", "u1")[0]
    bea = mem.add("My name is Bea", "u1")[0]
    assert (bea.event, bea.reason, bea.previous_id, bea.previous_text) == (
        EventType.UPDATE, "slot:name", ada.id, "My name is Ada")
    cy = mem.add("User's name is Cy", "u1")[0]
    assert (cy.event, cy.previous_id) == (EventType.UPDATE, bea.id)
    assert [m.text for m in mem.list("u1")] == ["User's name is Cy"]
    history = mem.history(cy.id, "u1")
    assert [m.text for m in history] == ["User's name is Cy", "My name is Bea", "My name is Ada"]
    assert [m.active for m in history] == [True, False, False]
    assert mem.get(ada.id, "u1").superseded_by_id == bea.id
    assert mem.get(cy.id, "u1").supersedes_id == bea.id
    hits = mem.search("what is the user's name?", "u1", k=5)
    assert [h.text for h in hits] == ["User's name is Cy"]


def test_same_slot_same_value_is_noop(make_memory):
    mem = make_memory()
    first = mem.add("User's favourite colour is blue", "u1")[0]
    events = mem.add("my favorite color is Blue", "u1")
    assert (events[0].event, events[0].id) == (EventType.NOOP, first.id)


def test_negation_contradiction_is_update(make_memory):
    mem = make_memory()
    old = mem.add("User likes cats", "u1")[0]
    new = mem.add("User does not like cats", "u1")[0]
    assert (new.event, new.reason, new.previous_id) == (EventType.UPDATE, "negation", old.id)
    back = mem.add("User likes cats", "u1")[0]  # changed their mind again: not a NOOP on history
    assert (back.event, back.reason, back.previous_id) == (EventType.UPDATE, "negation", new.id)
    assert [m.text for m in mem.list("u1")] == ["User likes cats"]
    assert len(mem.list("u1", include_inactive=True)) == 3


def test_number_change_is_update(make_memory):
    mem = make_memory()
    old = mem.add("User has 2 cats", "u1")[0]
    new = mem.add("User has 3 cats", "u1")[0]
    assert (new.event, new.reason, new.previous_id) == (EventType.UPDATE, "number", old.id)


def test_near_duplicate_with_changed_word_is_revision_not_dropped(make_memory):
    mem = make_memory()
    old = mem.add("The meeting is on Monday", "u1")[0]
    new = mem.add("The meeting is on Tuesday", "u1")[0]  # cosine ~0.94: not a duplicate to drop
    assert (new.event, new.reason, new.previous_id) == (EventType.UPDATE, "revision", old.id)
    assert [m.text for m in mem.list("u1")] == ["The meeting is on Tuesday"]


def test_related_but_distinct_facts_are_both_added(make_memory):
    mem = make_memory()
    mem.add("User likes green tea", "u1")
    events = mem.add("User likes black tea", "u1")  # cosine ~0.81, no negation/number/slot change
    assert kinds(events) == [(EventType.ADD, "new")]
    assert len(mem.list("u1")) == 2


def test_facts_of_one_call_see_each_other(make_memory):
    mem = make_memory()
    events = mem.add(
        [{"role": "user", "content": "My name is Ada. Call me Bea. I live in Paris."}], "u1")
    assert [(e.event, e.text) for e in events] == [
        (EventType.ADD, "User's name is Ada"),
        (EventType.UPDATE, "User's name is Bea"),
        (EventType.ADD, "User lives in Paris"),
    ]
    assert events[1].previous_id == events[0].id


def test_messages_without_facts_store_nothing(make_memory):
    mem = make_memory()
    assert mem.add([{"role": "user", "content": "What's the weather like?"},
                    {"role": "assistant", "content": "My name is Loom."}], "u1") == []
    assert mem.list("u1") == []
