"""Forgetting by age (TTL with an injected clock) and by capacity (eviction order)."""

from __future__ import annotations

from loom.memory import EventType


def test_ttl_forgets_memories_unused_for_longer_than_ttl(make_memory, clock):
    mem = make_memory(ttl_s=100)
    old = mem.add("User lives in Paris", "u1")[0]
    clock.advance(50)
    young = mem.add("User plays the cello", "u1")[0]
    clock.advance(70)  # old: 120 s unused > 100; young: 70 s
    hits = mem.search("where does the user live?", "u1", k=5)
    assert old.id not in [h.id for h in hits]
    assert [m.id for m in mem.list("u1", include_inactive=True)] == [young.id]


def test_ttl_counts_from_last_use_so_recalled_memories_survive(make_memory, clock):
    mem = make_memory(ttl_s=100)
    a = mem.add("User lives in Paris", "u1")[0]
    b = mem.add("User plays the cello", "u1")[0]
    clock.advance(90)
    assert mem.search("where does the user live?", "u1", k=1)[0].id == a.id
    clock.advance(30)  # a: used 30 s ago; b: unused for 120 s
    events = mem.add("User drinks green tea", "u1")
    assert [(e.event, e.id, e.reason) for e in events[1:]] == [(EventType.DELETE, b.id, "ttl")]
    assert sorted(m.text for m in mem.list("u1")) == ["User drinks green tea", "User lives in Paris"]


def test_purge_expired_deletes_history_with_the_expired_memory(make_memory, clock):
    mem = make_memory(ttl_s=10)
    old = mem.add("My name is Ada", "u1")[0]
    new = mem.add("My name is Bea", "u1")[0]
    clock.advance(11)
    events = mem.purge_expired("u1")
    assert [(e.id, e.reason) for e in events] == [(new.id, "ttl"), (old.id, "ttl")]
    assert mem.list("u1", include_inactive=True) == []


def test_capacity_evicts_lowest_value_first(make_memory, clock):
    mem = make_memory(capacity_per_namespace=3)
    a = mem.add("User lives in Paris", "u1")[0].id
    clock.advance(10)
    b = mem.add("User plays the cello", "u1")[0].id
    clock.advance(10)
    c = mem.add("User is allergic to peanuts", "u1")[0].id
    clock.advance(10)
    assert mem.search("Where does the user live?", "u1", k=1)[0].id == a  # a: used once, most recent
    clock.advance(10)
    ev = mem.add("User drinks green tea", "u1")
    d = ev[0].id
    # values: a (used) > d (newest) > c > b  -> b goes first
    assert [(e.event, e.id, e.reason) for e in ev[1:]] == [(EventType.DELETE, b, "capacity")]
    clock.advance(10)
    ev = mem.add("User collects stamps", "u1")
    assert [(e.event, e.id) for e in ev[1:]] == [(EventType.DELETE, c)]
    clock.advance(10)
    ev = mem.add("User speaks Japanese", "u1")
    assert [(e.event, e.id) for e in ev[1:]] == [(EventType.DELETE, d)]
    assert [m.id for m in mem.list("u1")][0] == a


def test_capacity_ties_evict_lowest_id_first(make_memory):
    mem = make_memory(capacity_per_namespace=2)  # clock never moves: every value ties
    ids = [mem.add(t, "u1")[0].id for t in ("User lives in Paris", "User plays the cello")]
    ev = mem.add("User is allergic to peanuts", "u1")
    assert [(e.event, e.id) for e in ev[1:]] == [(EventType.DELETE, ids[0])]


def test_capacity_is_per_namespace(make_memory):
    mem = make_memory(capacity_per_namespace=1)
    mem.add("User lives in Paris", "alice")
    mem.add("User plays the cello", "bob")
    assert len(mem.list("alice")) == 1 and len(mem.list("bob")) == 1
