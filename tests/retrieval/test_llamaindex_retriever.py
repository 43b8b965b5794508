"""``LoomLlamaRetriever`` under LlamaIndex's retriever API on a real index (MiniLM + FAISS):
nodes carry the chunk text, id, score and Loom's metadata in search order, the async path
agrees, and what LlamaIndex prints for the LLM shows title and section but not the chunk id.
(LlamaIndex's query engine over it with the real model: tests/orchestrator/test_llamaindex_llm.py.)"""

from __future__ import annotations

import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from loom.retrieval import Retriever
from loom.retrieval.llamaindex import LoomLlamaRetriever
from tests.retrieval.helpers import index_of

DOCS = {
    "orchard.md": "# Orchard\n\n## Pruning\n\nPrune the apple trees in late winter, before the buds swell.\n\n"
                  "## Harvest\n\nPick the pears in September while they are still firm.",
    "hives.md": "# Hives\n\n## Swarming\n\nBees swarm in May when the hive runs out of room for the queen.",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder) -> Retriever:
    return index_of(tmp_path_factory, DOCS, embedder, "li-docs")


def test_nodes_carry_chunk_text_id_score_and_metadata_in_search_order(index: Retriever) -> None:
    nodes = LoomLlamaRetriever(index, similarity_top_k=2).retrieve("when should I prune apple trees")
    hits = index.search("when should I prune apple trees", k=2)
    assert len(nodes) == 2 and all(isinstance(n, NodeWithScore) for n in nodes)
    assert [(n.node.node_id, n.node.get_content(), n.score) for n in nodes] == [
        (h.chunk_id, h.text, h.score) for h in hits]
    meta = nodes[0].node.metadata
    assert meta["source"].endswith("orchard.md") and meta["chunk_id"] == hits[0].chunk_id
    assert (meta["title"], meta["section"]) == ("Orchard", "Orchard > Pruning")


def test_llm_view_of_a_node_shows_title_and_section_but_not_the_chunk_id(index: Retriever) -> None:
    (node,) = LoomLlamaRetriever(index, similarity_top_k=1).retrieve("bees swarm")
    shown = node.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "section: Hives > Swarming" in shown and "title: Hives" in shown
    assert node.node.metadata["chunk_id"] not in shown and shown.endswith(node.node.get_content())


async def test_async_retrieve_returns_the_same_nodes(index: Retriever) -> None:
    r = LoomLlamaRetriever(index, similarity_top_k=3)
    got = await r.aretrieve(QueryBundle("pears in September"))
    want = r.retrieve("pears in September")
    assert [(n.node.node_id, n.score) for n in got] == [(n.node.node_id, n.score) for n in want]


def test_top_k_mode_and_filters_reach_the_search(index: Retriever) -> None:
    assert len(LoomLlamaRetriever(index, similarity_top_k=3).retrieve("trees")) == 3
    (node,) = LoomLlamaRetriever(index, similarity_top_k=5, mode="bm25").retrieve("queen")
    assert node.node.metadata["title"] == "Hives"
    only = LoomLlamaRetriever(index, similarity_top_k=5, filters={"title": "Hives"}).retrieve("apple trees")
    assert [n.node.metadata["title"] for n in only] == ["Hives"]
