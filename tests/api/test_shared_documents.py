"""Documents the operator ingests with ``loom ingest`` into the index ``loom serve --index`` serves have no
owner: every caller's search and sessions find them, no caller can delete them, and an owner's own documents
stay private beside them.  An index ingested as ``loom ingest`` does (``Retriever.ingest``) and a real ``loom serve`` (tiny random-weight model: what
matters is what retrieval shows, not the answer) with two owners' keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ENGINE_FLAGS
from tests.api.server import Server, new_key

GUIDE = """# Ferry guide

## Timetable

The island ferry leaves the harbour at 07:15 and 19:40 every day.
"""


@pytest.fixture(scope="module")
def served(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    work = tmp_path_factory.mktemp("shared-docs")
    (work / "ferry.md").write_text(GUIDE)
    from loom.retrieval import Retriever

    Retriever.open(work / "index").ingest([work / "ferry.md"], show_progress=False)  # as `loom ingest` does
    db = f"sqlite:///{work / 'loom.db'}"
    keys = {o: new_key(db, o) for o in ("alice", "bob")}
    srv = Server(checkpoint, db, work, "--index", str(work / "index"), *ENGINE_FLAGS).start()
    yield srv, keys
    srv.stop()


def _client(served: tuple[Server, dict[str, str]], owner: str) -> httpx.Client:
    srv, keys = served
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {keys[owner]}"}, timeout=120)


def test_every_owner_finds_the_operators_documents_and_only_their_own_beside_them(served):
    with _client(served, "alice") as alice, _client(served, "bob") as bob:
        for client in (alice, bob):
            hits = client.get("/v1/search", params={"q": "When does the island ferry leave?", "k": 2}).json()["data"]
            assert hits and hits[0]["document"].endswith("ferry.md") and "07:15" in hits[0]["text"]
        assert alice.post("/v1/documents", json={"id": "diary", "text": "Alice takes the 07:15 ferry on Mondays."}
                          ).status_code == 200
        assert any(h["document"] == "diary" for h in alice.get("/v1/search", params={"q": "Alice ferry Mondays"}
                                                                ).json()["data"])
        assert all("Alice" not in h["text"] for h in bob.get("/v1/search", params={"q": "Alice ferry Mondays"}
                                                             ).json()["data"])


def test_a_shared_document_is_nobodys_to_delete_even_when_its_id_reads_like_an_owners(tmp_path):
    """DELETE /v1/documents/{id} removes ``<owner>/<id>`` only when the chunks carry that owner: a shared document
    whose id happens to start with ``alice/`` (``loom ingest`` keeps a file's path as its id) is not alice's."""
    from loom.api.turns import OwnerRetriever
    from loom.retrieval import Retriever
    from loom.retrieval.types import Document, Section

    index = Retriever(tmp_path / "index")
    index.add_documents([Document(id="alice/ferry.md", title="Ferry", sections=(Section("Timetable", GUIDE),)),
                         Document(id="alice/diary", title="Diary", sections=(Section("", "Mondays: the 07:15."),),
                                  metadata={"owner": "alice"})])
    alice, bob = OwnerRetriever(index, "alice"), OwnerRetriever(index, "bob")
    assert not alice.owns("alice/ferry.md") and alice.owns("alice/diary") and not bob.owns("alice/diary")
    assert {h.document for h in bob.search("ferry timetable Mondays", k=5)} == {"alice/ferry.md"}


def test_a_session_with_index_is_shown_the_shared_documents(served):
    with _client(served, "bob") as bob:
        sid = bob.post("/v1/sessions", json={"index": True, "sampling": {"temperature": 0, "max_tokens": 4}}).json()["id"]
        turn = bob.post(f"/v1/sessions/{sid}/messages", json={"content": "When does the island ferry leave the harbour?"}
                        ).json()
        assert turn["state"] == "done" and not turn["retrieval"]["no_match"]
        assert any(s.endswith("Timetable") for s in turn["retrieval"]["sources"]), turn["retrieval"]
