"""Plain text to a :class:`Document`: one section, titled by its first line."""

from __future__ import annotations

from loom.retrieval.types import Document, Section


def load_text(text: str, doc_id: str, title: str | None = None) -> Document:
    """Plain text: one section; the title is the first non-empty line."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    sections = (Section("", text.strip()),) if text.strip() else ()
    return Document(doc_id, title or first[:200] or doc_id, sections, source=doc_id)
