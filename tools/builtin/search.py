"""``search_documents``: the retriever as a tool the model can call.

The tool calls ``retriever.search(query, k)`` on anything with that method
(:class:`retrieval.Retriever` in Loom) and shows the hits compactly: one header
line per hit with its rank, chunk id, document, section and score, then the
chunk text.  The chunk id lets the model cite what it used.

``select`` decides which of the hits the model sees: Loom's agents, ``loom chat``
and ``loom serve`` pass the relevance rule of the retrieval they run themselves
(``loom.orchestrator.relevance.search_tool``), so a search about something the
index does not hold answers "no passage matches" instead of its ``k`` nearest,
unrelated passages, which a small model would answer from.
"""

# No ``from __future__ import annotations``: the tool's signature is built in a
# closure and its hints must be real objects when ``@tool`` reads them.
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Protocol

from pydantic import Field

from loom.json_types import JSON
from loom.tools.function_tool import FunctionTool, tool

__all__ = ["NO_MATCH_RESULT", "SEARCH_TOOL_NAME", "SearchBackend", "SearchResult", "format_hits",
           "search_documents_tool"]

#: The tool's name unless another is given.
SEARCH_TOOL_NAME = "search_documents"

#: The tool's result when no hit is shown (``{query}``: the query searched).
NO_MATCH_RESULT = "No passage of the indexed documents matches {query!r}."

_DESCRIPTION = (
    "Search the document collection and return the most relevant passages, "
    "each with its chunk id, document and section."
)


class SearchResult(Protocol):
    """One hit as the tools and the prompt read it (``loom.retrieval.types.Hit``)."""

    @property
    def chunk_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def document(self) -> str: ...
    @property
    def section(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, JSON]: ...


class SearchBackend(Protocol):
    """Anything that searches: ``search(query, k) -> hits``, best first."""

    def search(self, query: str, k: int = 5) -> Sequence[SearchResult]: ...


def format_hits(hits: Sequence[SearchResult]) -> str:
    """Render hits as ``[rank] chunk_id | document | section | score`` + text blocks."""
    blocks = []
    for rank, hit in enumerate(hits, 1):
        head = [f"[{rank}] {hit.chunk_id}", str(hit.document)]
        if getattr(hit, "section", ""):
            head.append(str(hit.section))
        head.append(f"score {float(hit.score):.3f}")
        blocks.append(" | ".join(head) + "\n" + str(hit.text).strip())
    return "\n\n".join(blocks)


def search_documents_tool(
    retriever: SearchBackend,
    k: int = 5,
    *,
    max_k: int = 20,
    name: str = SEARCH_TOOL_NAME,
    description: str = _DESCRIPTION,
    timeout_s: float | None = None,
    select: Callable[[Sequence[SearchResult]], Sequence[SearchResult]] | None = None,
) -> FunctionTool:
    """A ``search_documents(query, k=k)`` tool over ``retriever``.

    Args:
        retriever: object with ``search(query: str, k: int) -> list[Hit]``.
        k: number of hits returned when the model does not ask for another count.
        max_k: most hits the model may ask for.
        name, description, timeout_s: as for :func:`tools.tool`.
        select: which of a search's hits to show, in rank order (``None``: all); when it keeps
            none the tool answers that no passage matches (:data:`NO_MATCH_RESULT`).

    Raises:
        ValueError: ``k`` not in ``[1, max_k]`` or a retriever without ``search``.
    """
    if not callable(getattr(retriever, "search", None)):
        raise ValueError("retriever: needs a search(query, k) method")
    if not 1 <= k <= max_k:
        raise ValueError(f"k: must be in [1, {max_k}], got {k}")
    default_k = k

    def search_documents(
        query: Annotated[str, Field(min_length=1)],
        k: Annotated[int, Field(ge=1, le=max_k)] = default_k,
    ) -> str:
        """Search the document collection.

        Args:
            query: what to look for, in natural language or keywords.
            k: how many passages to return.
        """
        hits = retriever.search(query, k)  # sync: FunctionTool runs it off the event loop
        if select is not None:
            hits = select(hits)
        return format_hits(hits) if hits else NO_MATCH_RESULT.format(query=query)

    return tool(search_documents, name=name, description=description, timeout_s=timeout_s)
