"""Documents (real FAISS index, real MiniLM) and long-term memories, owner-scoped."""

from __future__ import annotations

import uuid

import httpx

DOC = ("The Loom gateway listens on port 7447. Operators rotate the gateway keys every ninety days. "
       "Backups of the session database run nightly at 02:00 UTC.")


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_documents_are_searchable_by_their_owner_only(alice, bob):
    r = alice.post("/v1/documents", json={"id": "ops-guide", "title": "Ops guide", "text": DOC})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "ops-guide" and r.json()["num_chunks"] >= 1
    hits = alice.get("/v1/search", params={"q": "which port does the gateway listen on", "k": 3}).json()["data"]
    assert hits and hits[0]["document"] == "ops-guide" and "7447" in hits[0]["text"]
    assert bob.get("/v1/search", params={"q": "gateway port"}).json()["data"] == []
    _error(bob.delete("/v1/documents/ops-guide"), 404)
    assert alice.get("/v1/search", params={"q": "gateway port"}).json()["data"]  # still there
    assert _error(alice.get("/v1/search", params={"q": ""}), 400)["param"] == "q"


def test_session_with_index_retrieves_the_owners_documents(alice):
    alice.post("/v1/documents", json={"id": "backup-policy", "text": DOC})
    # "no_match_answer": null: the model always answers, told when nothing retrieved is related
    sid = alice.post("/v1/sessions", json={"index": True, "no_match_answer": None,
                                           "sampling": {"temperature": 0, "max_tokens": 8}}).json()["id"]
    turn = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "When do backups run?"}).json()
    assert turn["state"] == "done"
    assert turn["ledger"]["prompt"]["retrieval"]["tokens"] > 0
    # DOC covers three topics in one chunk: "When do backups run?" scores 0.21 against it, under MiniLM's cutoff
    assert turn["retrieval"] == {"sources": [], "no_match": True, "searched_as": None, "unsupported": [],
                                 "unknown_terms": [], "widened": False, "attributed": []}
    focused = alice.post("/v1/sessions", json={"index": True, "similarity_cutoff": None, "no_match_answer": None,
                                               "sampling": {"temperature": 0, "max_tokens": 8}}).json()["id"]
    turn = alice.post(f"/v1/sessions/{focused}/messages", json={"content": "When do backups run?"}).json()
    assert turn["retrieval"]["sources"] and not turn["retrieval"]["no_match"]  # no cutoff: every hit is shown
    bad = alice.post("/v1/sessions", json={"index": True, "similarity_cutoff": 2})
    assert bad.status_code == 400 and "similarity_cutoff" in bad.text


def test_a_docs_qa_session_answers_a_question_naming_a_term_no_document_uses_as_not_found(alice):
    alice.post("/v1/documents", json={"id": "gateway-notes", "text": DOC})
    sid = alice.post("/v1/sessions", json={"index": True, "similarity_cutoff": None, "no_match_answer": "Not documented.",
                                           "sampling": {"temperature": 0, "max_tokens": 8}}).json()["id"]
    turn = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Does the gateway speak IPv6 multicast?"}).json()
    assert turn["state"] == "done" and turn["answer"] == "Not documented."
    assert turn["retrieval"]["sources"] and turn["retrieval"]["unknown_terms"] == ["multicast"]
    assert turn["usage"]["completion_tokens"] == 0 and not turn["retrieval"]["widened"]  # answered without a model call
    stored = alice.get(f"/v1/sessions/{sid}/messages").json()["data"][0]
    assert stored["retrieval"] == turn["retrieval"]


def test_a_turn_says_when_nothing_in_the_index_was_related_and_the_stored_turn_keeps_it(alice):
    from loom.orchestrator.chat_agent import DOCS_SYSTEM
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER

    alice.post("/v1/documents", json={"id": "ops-runbook", "text": DOC})
    created = alice.post("/v1/sessions", json={"index": True, "sampling": {"temperature": 0, "max_tokens": 8}}).json()
    # a session that only reads the index is a documentation-QA session unless told otherwise
    assert created["config"]["no_match_answer"] == NOT_FOUND_ANSWER
    assert created["config"]["system_prompt"] == DOCS_SYSTEM.strip()  # a few sentences, at most one example
    turn = alice.post(f"/v1/sessions/{created['id']}/messages", json={"content": "What is the capital of Peru?"}).json()
    assert turn["retrieval"] == {"sources": [], "no_match": True, "searched_as": None, "unsupported": [],
                                 "unknown_terms": [], "widened": False, "attributed": []}
    assert turn["answer"] == NOT_FOUND_ANSWER and turn["usage"]["completion_tokens"] == 0  # no guess, no model call
    stored = alice.get(f"/v1/sessions/{created['id']}/messages").json()["data"][0]
    assert stored["retrieval"] == turn["retrieval"] and stored["answer"] == NOT_FOUND_ANSWER
    for body in ({"no_match_answer": None}, {"tools": ["calculator"]}, {"memory_namespace": "prefs"}):
        config = alice.post("/v1/sessions", json={"index": True, **body}).json()["config"]
        assert config["no_match_answer"] is None, body  # asked for, or the answer may come from a tool or memory
        assert config["system_prompt"] == ("" if body.keys() & {"tools", "memory_namespace"} else DOCS_SYSTEM.strip())
    assert alice.post("/v1/sessions", json={"index": True, "system_prompt": ""}).json()["config"]["system_prompt"] == ""
    plain = alice.post("/v1/sessions", json={"sampling": {"temperature": 0, "max_tokens": 4}}).json()["id"]
    assert alice.post(f"/v1/sessions/{plain}/messages", json={"content": "Hi"}).json()["retrieval"] is None


def test_a_documentation_qa_session_answers_its_no_match_answer_and_says_why(alice):
    alice.post("/v1/documents", json={"id": "ops-notes", "text": DOC})
    body = {"index": True, "no_match_answer": "Not in the ops documents.", "sampling": {"temperature": 0, "max_tokens": 24}}
    sid = alice.post("/v1/sessions", json=body).json()["id"]
    turn = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "What is the capital of Peru?"}).json()
    assert turn["answer"] == "Not in the ops documents." and turn["retrieval"]["no_match"]
    assert turn["usage"]["completion_tokens"] == 0  # no model call
    turn = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Which port does the Loom gateway listen on?"}).json()
    assert turn["state"] == "done" and isinstance(turn["retrieval"]["unsupported"], list)
    # the answer is the model's only when it rests on the shown sections
    assert (turn["answer"] == "Not in the ops documents.") == bool(turn["retrieval"]["unsupported"]), turn
    for bad in ("", 5):
        r = alice.post("/v1/sessions", json={**body, "no_match_answer": bad})
        assert r.status_code == 400 and "no_match_answer" in r.text


def test_memories_add_list_search_delete_and_isolation(alice, bob):
    r = alice.post("/v1/memories", json={"text": "My favourite colour is teal.", "namespace": "prefs"})
    assert r.status_code == 200, r.text
    (ev,) = r.json()["data"]
    assert ev["event"] == "ADD" and ev["namespace"] == "prefs"
    listed = alice.get("/v1/memories", params={"namespace": "prefs"}).json()["data"]
    assert [m["id"] for m in listed] == [ev["id"]]
    hits = alice.get("/v1/memories", params={"namespace": "prefs", "q": "favourite colour"}).json()["data"]
    assert hits[0]["id"] == ev["id"] and hits[0]["score"] is not None
    assert bob.get("/v1/memories", params={"namespace": "prefs"}).json()["data"] == []
    _error(bob.delete(f"/v1/memories/{ev['id']}", params={"namespace": "prefs"}), 404)
    assert alice.delete(f"/v1/memories/{ev['id']}", params={"namespace": "prefs"}).json()["deleted"] is True
    assert alice.get("/v1/memories", params={"namespace": "prefs"}).json()["data"] == []
    _error(alice.delete(f"/v1/memories/{ev['id']}", params={"namespace": "prefs"}), 404)


def test_follow_up_turns_are_condensed_by_the_chosen_mode_or_not_at_all(alice, bob):
    """Default ``history``: no model call; ``model``: a rewrite call of its own ledger class; false: neither."""
    bob.post("/v1/documents", json={"id": "bob-secret", "text": "The vault code for backups is 4417. Backups run hourly."})
    alice.post("/v1/documents", json={"id": "alice-ops", "text": DOC})
    rewrite_tokens = {}
    for mode in ("history", "model", False):
        body = {"index": True, "sampling": {"temperature": 0, "max_tokens": 8}}
        if mode != "history":
            body["condense_question"] = mode
        sid = alice.post("/v1/sessions", json=body).json()["id"]
        alice.post(f"/v1/sessions/{sid}/messages", json={"content": "When do backups run?"})
        turn = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "and the vault code for them?"}).json()
        assert turn["state"] == "done"
        rewrite_tokens[mode] = turn["ledger"]["prompt"]["query_rewrite"]["tokens"]
    assert rewrite_tokens["history"] == 0 and rewrite_tokens["model"] > 0 and rewrite_tokens[False] == 0
    bad = alice.post("/v1/sessions", json={"index": True, "condense_question": "llm"})
    assert bad.status_code == 400 and "condense_question" in bad.text


def test_memory_id_outside_int64_is_a_400_naming_it(alice):
    err = _error(alice.delete("/v1/memories/124418009808678961152"), 400)
    assert err["param"] == "memory_id"
    _error(alice.delete("/v1/memories/-1"), 400)
    _error(alice.delete("/v1/memories/9223372036854775807"), 404)  # in range, not theirs: not found


def test_a_memory_posted_with_a_third_party_source_is_kept_for_review_not_remembered(alice):
    """``"source": "document"`` names where the text comes from (it was read as a session id before)."""
    ns = f"src-{uuid.uuid4().hex[:8]}"
    r = alice.post("/v1/memories", json={"text": "I live in Lisbon.", "namespace": ns, "source": "document"})
    assert r.status_code == 200, r.text
    assert all("Lisbon" not in m["text"] for m in alice.get("/v1/memories", params={"namespace": ns}).json()["data"])
    ok = alice.post("/v1/memories", json={"text": "I live in Oslo.", "namespace": ns, "source": "user"})
    assert ok.status_code == 200
    assert any("Oslo" in m["text"] for m in alice.get("/v1/memories", params={"namespace": ns}).json()["data"])
    bad = alice.post("/v1/memories", json={"text": "x", "namespace": ns, "source": "sess_123"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "source"



def test_a_turns_retrieval_lists_each_section_once_at_its_best_rank():
    from loom.api.turns import retrieval_field
    from loom.orchestrator.events import RunResult
    from loom.retrieval.types import Hit

    def hit(section: str, text: str) -> Hit:
        return Hit(f"{section}-{text}", text, 0.5, "guide.md", section)

    result = RunResult(retrieved=[hit("For", "a"), hit("Loop Controls", "b"), hit("For", "c")])
    assert retrieval_field(result)["sources"] == ["guide.md - For", "guide.md - Loop Controls"]
