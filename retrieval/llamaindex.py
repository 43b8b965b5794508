"""``LoomLlamaRetriever``: a LlamaIndex retriever over a Loom index (extra ``llamaindex``).

Anything in LlamaIndex that takes a retriever takes this one
(``RetrieverQueryEngine.from_args(retriever, llm=...)``,
``CondensePlusContextChatEngine``, a ``RetrieverTool``).  Each hit of
:meth:`retrieval.Retriever.search` becomes a ``NodeWithScore``: a ``TextNode``
whose ``id_`` is the chunk id and whose text is the chunk text, scored as the
search scored it (higher is better; the scale depends on ``mode``).  The node
metadata holds the chunk's own metadata plus ``source`` (document id),
``title``, ``section`` and ``chunk_id``; the chunk id is left out of what the
LLM and embedders see (LlamaIndex prints metadata above each node's text).
The async path runs the search in a worker thread (``Retriever`` is thread-safe).
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from loom.json_types import JSONObject
from loom.retrieval.retriever import Retriever
from loom.retrieval.types import Hit

_HIDDEN = ["chunk_id"]


def hit_to_node(hit: Hit) -> NodeWithScore:
    """One search hit as a LlamaIndex ``NodeWithScore`` (metadata as in the module docstring)."""
    meta = {**hit.metadata, "source": hit.document, "title": hit.title, "section": hit.section,
            "chunk_id": hit.chunk_id}
    node = TextNode(id_=hit.chunk_id, text=hit.text, metadata=meta, excluded_llm_metadata_keys=list(_HIDDEN),
                    excluded_embed_metadata_keys=list(_HIDDEN))
    return NodeWithScore(node=node, score=hit.score)


class LoomLlamaRetriever(BaseRetriever):
    """LlamaIndex retriever over a :class:`retrieval.Retriever` index.

    Args:
        retriever: the open index (``Retriever.open(path)``).
        similarity_top_k: nodes per query (default 2, LlamaIndex's default).
        mode: ``"hybrid"`` (default), ``"dense"`` or ``"bm25"``.
        filters: metadata filters as :meth:`retrieval.Retriever.search` takes them.
        callback_manager: LlamaIndex callbacks (events of each retrieval).

    Raises:
        ValueError: (on a query) an empty query string, ``similarity_top_k`` < 1 or
            an unknown mode, from :meth:`retrieval.Retriever.search`.
    """

    def __init__(self, retriever: Retriever, similarity_top_k: int = 2, mode: str = "hybrid",
                 filters: JSONObject | None = None, callback_manager: CallbackManager | None = None,
                 **kwargs: Any) -> None:
        self.retriever = retriever
        self.similarity_top_k, self.mode, self.filters = similarity_top_k, mode, filters
        super().__init__(callback_manager=callback_manager, **kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.retriever.search(query_bundle.query_str, k=self.similarity_top_k, mode=self.mode,
                                     filters=self.filters)
        return [hit_to_node(h) for h in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)


__all__ = ["LoomLlamaRetriever", "hit_to_node"]
