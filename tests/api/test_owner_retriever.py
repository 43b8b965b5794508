"""loom.api.turns.OwnerRetriever: every search path of a session's retriever view is owner-filtered."""

from __future__ import annotations

import pytest

from loom.api.turns import OwnerRetriever
from loom.retrieval import Document, Retriever, Section


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory):
    r = Retriever(tmp_path_factory.mktemp("owners"))
    r.add_documents([
        Document("a", "Ops", (Section("", "Backups run nightly at 02:00 UTC."),), metadata={"owner": "alice"}),
        Document("b", "Vault", (Section("", "The vault code for backups is 4417."),), metadata={"owner": "bob"}),
    ], show_progress=False)
    return r


def test_fused_multi_query_search_sees_only_the_owners_documents(shared_index) -> None:
    view = OwnerRetriever(shared_index, "alice")
    hits = view.search_many(["vault code for backups", "and the vault code?"], k=5)
    assert [h.document for h in hits] == ["a"]
    assert [h.document for h in view.search("vault code", k=5)] == ["a"]


def test_unfiltered_search_methods_are_not_reachable_through_the_view(shared_index) -> None:
    view = OwnerRetriever(shared_index, "alice")
    assert not hasattr(view, "search_unfiltered")
    with pytest.raises(AttributeError):
        view.search_raw  # noqa: B018 - any search* not defined by the view
    assert view.documents() == shared_index.documents()  # other attributes pass through
