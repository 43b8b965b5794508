"""Built-in ``search_documents`` and ``remember``/``recall`` over the real
``retrieval.Retriever`` (FAISS + MiniLM) and ``memory.LongTermMemory`` (SQLite)."""

import pytest

from loom.memory import LongTermMemory
from loom.retrieval import Retriever
from loom.retrieval.types import Document, Section
from loom.tools import ToolRegistry
from loom.tools.builtin import memory_tools, search_documents_tool


DOCS = [
    ("guide:kv", "KV cache", [
        ("Paged attention", "The KV cache is split into fixed-size blocks addressed by a block table."),
        ("Prefix caching", "Blocks whose token prefix was seen before are reused instead of recomputed."),
    ]),
    ("guide:cooking", "Cooking", [
        ("Bread", "Knead the dough for ten minutes and let it rise for an hour."),
    ]),
]  # fmt: skip


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    r = Retriever(tmp_path_factory.mktemp("index"))
    r.add_documents(
        Document(id=doc_id, title=title, sections=tuple(Section(h, t) for h, t in sections))
        for doc_id, title, sections in DOCS
    )
    return r


async def test_search_documents_returns_compact_hits_from_the_real_retriever(retriever):
    search = search_documents_tool(retriever, k=2)
    expected_hits = retriever.search("how are KV cache blocks reused for a shared prefix?", 2)
    result = await ToolRegistry([search]).call(
        "search_documents", {"query": "how are KV cache blocks reused for a shared prefix?"}
    )
    assert not result.is_error, result.content
    blocks = result.content.split("\n\n")
    assert len(blocks) == 2
    for rank, (block, hit) in enumerate(zip(blocks, expected_hits, strict=True), 1):
        head, text = block.split("\n", 1)
        assert head == f"[{rank}] {hit.chunk_id} | {hit.document} | {hit.section} | score {hit.score:.3f}"
        assert text == hit.text
    assert {h.document for h in expected_hits} == {"guide:kv"}


async def test_search_documents_k_is_validated_before_the_retriever_runs(retriever):
    reg = ToolRegistry([search_documents_tool(retriever, k=2, max_k=3)])
    result = await reg.call("search_documents", {"query": "bread", "k": 50})
    assert result.error_type == "invalid_arguments"
    assert "field 'k': Input should be less than or equal to 3" in result.content
    one = await reg.call("search_documents", {"query": "bread dough", "k": 1})
    assert one.content.startswith("[1] ") and "guide:cooking | Bread" in one.content


async def test_select_decides_which_hits_the_model_sees_and_none_left_says_so(retriever):
    seen = []

    def select(hits):
        seen.append(len(hits))
        return [h for h in hits[:1] if h.document == "guide:cooking"]  # the best hit, when it is about cooking

    reg = ToolRegistry([search_documents_tool(retriever, k=3, select=select)])
    bread = await reg.call("search_documents", {"query": "bread dough"})
    assert bread.content.startswith("[1] ") and "guide:cooking | Bread" in bread.content and "[2]" not in bread.content
    kv = await reg.call("search_documents", {"query": "block table"})
    assert seen == [3, 3]  # select saw every hit the retriever returned
    assert kv.content == "No passage of the indexed documents matches 'block table'."


def test_search_documents_tool_rejects_bad_setup(retriever):
    with pytest.raises(ValueError, match="k: must be in"):
        search_documents_tool(retriever, k=0)
    with pytest.raises(ValueError, match="retriever"):
        search_documents_tool(object())


@pytest.fixture
def memory(tmp_path):
    mem = LongTermMemory(f"sqlite:///{tmp_path / 'memory.db'}")
    yield mem
    mem.close()


async def test_remember_then_recall_round_trip_through_sqlite(memory):
    reg = ToolRegistry(memory_tools(memory, "user-1"))
    assert reg.names == ["recall", "remember"]
    stored = await reg.call("remember", {"text": "The user's favourite colour is green."})
    assert not stored.is_error, stored.content
    [item] = memory.list("user-1")
    assert stored.content == f"ADD #{item.id}: The user's favourite colour is green."

    again = await reg.call("remember", {"text": "The user's favourite colour is green."})
    assert again.content.startswith(f"NOOP #{item.id}: ")

    recalled = await reg.call("recall", {"query": "what colour does the user like?", "k": 3})
    assert recalled.content.splitlines()[0] == f"[#{item.id}] The user's favourite colour is green."


async def test_memory_tools_are_bound_to_their_namespace(memory):
    alice = ToolRegistry(memory_tools(memory, "alice"))
    bob = ToolRegistry(memory_tools(memory, "bob"))
    await alice.call("remember", {"text": "Alice lives in Lisbon."})
    result = await bob.call("recall", {"query": "where does Alice live?"})
    assert (result.content, result.is_error) == ("No memories found for 'where does Alice live?'.", False)


async def test_remember_rejects_empty_text_without_writing(memory):
    reg = ToolRegistry(memory_tools(memory, "user-1"))
    result = await reg.call("remember", {"text": ""})
    assert result.error_type == "invalid_arguments"
    assert "field 'text': String should have at least 1 character" in result.content
    assert memory.list("user-1") == []
