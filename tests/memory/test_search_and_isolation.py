"""Search ranking, use statistics, and namespace isolation on a real SQLite file."""

from __future__ import annotations

import pytest

from loom.memory import EventType
from loom.runtime.errors import NotFoundError

FACTS = [
    "User lives in Paris",
    "User's favourite programming language is Rust",
    "User is allergic to peanuts",
    "User plays the cello in an orchestra",
]


def test_search_ranks_the_relevant_memory_first_and_counts_use(make_memory, clock):
    mem = make_memory()
    ids = [mem.add(f, "u1")[0].id for f in FACTS]
    clock.advance(10)
    hits = mem.search("Which programming language does the user like?", "u1", k=2)
    assert [h.id for h in hits][0] == ids[1]
    assert len(hits) == 2
    assert hits[0].score >= hits[1].score
    assert 0.0 < hits[0].similarity <= 1.0
    # Returned memories are marked used; the others are untouched.
    for h in hits:
        item = mem.get(h.id, "u1")
        assert (item.use_count, item.last_used_at) == (1, clock())
    untouched = set(ids) - {h.id for h in hits}
    assert all(mem.get(i, "u1").use_count == 0 for i in untouched)


def test_min_score_filters_on_similarity(make_memory):
    mem = make_memory()
    for f in FACTS:
        mem.add(f, "u1")
    assert mem.search("quantum chromodynamics lattice gauge theory", "u1", k=5, min_score=0.5) == []
    hits = mem.search("Is the user allergic to anything?", "u1", k=5, min_score=0.4)
    assert [h.text for h in hits] == ["User is allergic to peanuts"]


def test_recency_and_use_break_near_ties(make_memory, clock):
    mem = make_memory()
    old = mem.add("User enjoys jazz music", "u1")[0].id
    clock.advance(90 * 86_400)  # three half-lives later
    new = mem.add("User enjoys jazz concerts", "u1")[0].id
    hits = mem.search("jazz", "u1", k=2)
    sims = {h.id: h.similarity for h in hits}
    assert abs(sims[old] - sims[new]) < 0.1
    assert hits[0].id == new


def test_search_is_deterministic_and_sees_writes_of_another_handle(make_memory, tmp_path):
    mem = make_memory()
    other = make_memory()  # a second handle on the same file (as another replica would be)
    for f in FACTS:
        mem.add(f, "u1")
    first = [h.id for h in mem.search("music", "u1", k=4)]
    other.add("User sings in a choir", "u1")
    after = mem.search("music", "u1", k=5)
    assert "User sings in a choir" in [h.text for h in after]
    assert len(first) == 4


def test_bad_arguments_raise_value_errors_naming_the_field(make_memory):
    mem = make_memory()
    with pytest.raises(ValueError, match="namespace"):
        mem.add("fact", "")
    with pytest.raises(ValueError, match="text"):
        mem.add("   ", "u1")
    with pytest.raises(ValueError, match="k"):
        mem.search("q", "u1", k=0)
    with pytest.raises(ValueError, match="query"):
        mem.search("", "u1")
    with pytest.raises(ValueError, match="source"):
        mem.add("fact", "u1", source=3.5)
    with pytest.raises(ValueError, match="duplicate_threshold"):
        make_memory(duplicate_threshold=0.5, conflict_threshold=0.8)
    with pytest.raises(ValueError, match="capacity_per_namespace"):
        make_memory(capacity_per_namespace=0)
    assert mem.list("u1") == []


def test_same_fact_in_two_namespaces_is_two_memories(make_memory):
    mem = make_memory()
    a = mem.add("User lives in Paris", "alice")[0]
    b = mem.add("User lives in Paris", "bob")[0]
    assert (a.event, b.event) == (EventType.ADD, EventType.ADD)
    assert a.id != b.id
    # A contradiction in one namespace never supersedes the other's memory.
    moved = mem.add("User lives in Berlin", "alice")[0]
    assert (moved.event, moved.previous_id) == (EventType.UPDATE, a.id)
    assert mem.get(b.id, "bob").active
    assert [m.text for m in mem.list("bob")] == ["User lives in Paris"]


def test_search_never_returns_another_namespace(make_memory):
    mem = make_memory()
    mem.add("User is allergic to peanuts", "alice")
    assert mem.search("allergic to peanuts", "bob") == []
    mem.add("User likes hiking", "bob")
    hits = mem.search("allergic to peanuts", "bob", k=5)
    assert [h.text for h in hits] == ["User likes hiking"]


def test_foreign_ids_are_not_found_and_untouched(make_memory):
    mem = make_memory()
    a = mem.add("User is allergic to peanuts", "alice")[0]
    mem.add("User likes hiking", "bob")
    with pytest.raises(NotFoundError):
        mem.delete(a.id, "bob")
    with pytest.raises(NotFoundError):
        mem.get(a.id, "bob")
    with pytest.raises(NotFoundError):
        mem.history(a.id, "bob")
    assert mem.get(a.id, "alice").text == "User is allergic to peanuts"
    with pytest.raises(NotFoundError):
        mem.delete(10_000, "alice")


def test_forget_removes_one_namespace_only(make_memory):
    mem = make_memory()
    mem.add("My name is Ada", "alice")
    mem.add("My name is Ann", "alice")  # UPDATE: two rows with history
    mem.add("My name is Bob", "bob")
    assert mem.forget("alice") == 2
    assert mem.list("alice", include_inactive=True) == []
    assert [m.text for m in mem.list("bob")] == ["My name is Bob"]
    assert mem.namespaces() == ["bob"]


def test_delete_on_request_removes_memory_and_its_history(make_memory):
    mem = make_memory()
    old = mem.add("User has 2 cats", "u1")[0]
    new = mem.add("User has 3 cats", "u1")[0]
    keep = mem.add("User plays the cello", "u1")[0]
    events = mem.delete(new.id, "u1")
    assert [(e.event, e.id, e.reason) for e in events] == [
        (EventType.DELETE, new.id, "request"), (EventType.DELETE, old.id, "request")]
    assert [m.id for m in mem.list("u1", include_inactive=True)] == [keep.id]
    assert mem.search("how many cats", "u1", k=5, min_score=0.5) == []


def test_cached_vectors_never_hide_another_handles_writes(make_memory):
    mine, theirs = make_memory(), make_memory()
    paris = mine.add("User lives in Paris", "u1")[0]
    assert mine.search("where does the user live", "u1", k=1)[0].id == paris.id  # snapshot cached
    theirs.delete(paris.id, "u1")
    assert mine.search("where does the user live", "u1", k=1) == []
    lyon = theirs.add("User lives in Lyon", "u1")[0]
    moved = mine.add("User lives in Berlin", "u1")[0]  # decided against Lyon, not the cached Paris
    assert (moved.event, moved.previous_id) == (EventType.UPDATE, lyon.id)


def test_ranking_equals_brute_force_scoring_of_every_memory(make_memory, embedder, clock):
    import numpy as np

    mem = make_memory()
    facts = ["User plays jazz piano", "User listens to jazz radio", "User hates loud music",
             "User sings in a choir", "User plays the cello", "User collects vinyl records",
             "User lives in Paris", "User's favourite composer is Bach"]
    for i, f in enumerate(facts):
        mem.add(f, "u1")
        clock.advance(20 * 86_400 * (i % 3))
        if i % 2:
            mem.search(f, "u1", k=1)  # some memories used, at different times
    query = "music the user enjoys"
    items = mem.list("u1")
    q = embedder.encode([query])[0]
    sims = embedder.encode([m.text for m in items]) @ q
    scores = mem.scoring.score(sims, np.array([m.last_used_at for m in items]),
                               np.array([m.use_count for m in items]), clock())
    expected = [items[i].id for i in sorted(range(len(items)), key=lambda i: (-scores[i], items[i].id))][:3]
    hits = mem.search(query, "u1", k=3)
    assert [h.id for h in hits] == expected
    np.testing.assert_allclose([h.score for h in hits], sorted(scores, reverse=True)[:3], rtol=1e-5)


async def test_async_wrappers_run_add_and_search_off_the_event_loop(make_memory):
    mem = make_memory()
    events = await mem.aadd("User lives in Paris", "u1", source="session-9")
    assert events[0].event is EventType.ADD
    hits = await mem.asearch("where does the user live?", "u1", k=1)
    assert [h.id for h in hits] == [events[0].id]
    assert mem.get(events[0].id, "u1").source.session_id == "session-9"


def test_deleting_one_history_row_keeps_the_chain_linked(make_memory):
    mem = make_memory()
    ada = mem.add("My name is Ada", "u1")[0].id
    bea = mem.add("My name is Bea", "u1")[0].id
    cy = mem.add("My name is Cy", "u1")[0].id
    assert [(e.event, e.id) for e in mem.delete(bea, "u1")] == [(EventType.DELETE, bea)]
    assert [m.id for m in mem.history(cy, "u1")] == [cy, ada]
    assert (mem.get(ada, "u1").superseded_by_id, mem.get(cy, "u1").supersedes_id) == (cy, ada)
    assert [m.text for m in mem.list("u1")] == ["My name is Cy"]


def test_owners_are_a_column_of_their_own_so_no_namespace_name_reaches_another_owner(make_memory):
    """Owner and namespace are two columns: ``alice``'s namespace ``x::y`` and ``alice::x``'s namespace ``y`` (the
    two read the same when joined with ``::``) stay apart, and a library user's (no owner) stays apart from both."""
    mem = make_memory()
    alice, alice_x = mem.for_owner("alice"), mem.for_owner("alice::x")
    [a] = alice.add("User lives in Paris", "x::y")
    [b] = alice_x.add("User lives in Rome", "y")
    [c] = mem.add("User lives in Oslo", "alice::x::y")
    assert [m.text for m in alice.list("x::y")] == ["User lives in Paris"]
    assert [m.text for m in alice_x.list("y")] == ["User lives in Rome"]
    assert [m.text for m in mem.list("alice::x::y")] == ["User lives in Oslo"]
    assert [h.id for h in alice_x.search("where does the user live?", "y", k=5)] == [b.id]
    for view, other in ((alice, b.id), (alice_x, a.id), (mem, a.id)):
        with pytest.raises(NotFoundError):
            view.delete(other, "y" if view is alice_x else "x::y")
    assert (alice.namespaces(), alice_x.namespaces(), mem.namespaces()) == (["x::y"], ["y"], ["alice::x::y"])
    assert mem.get(c.id, "alice::x::y").text == "User lives in Oslo"
    with pytest.raises(ValueError, match="owner"):
        mem.for_owner("")
