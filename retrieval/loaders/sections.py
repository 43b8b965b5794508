"""The one place where a loader's text blocks become :class:`Section` s."""

from __future__ import annotations

from loom.json_types import JSONObject
from loom.retrieval.types import Section


class SectionBuilder:
    """Collects text blocks under a stack of headings, in document order.

    ``heading`` closes the current section and opens one under the new heading
    path (deeper levels nest, equal or higher levels replace); ``block`` adds a
    paragraph of text; ``entry`` adds a whole section of its own (a Sphinx
    object) under the current path, with its metadata.
    """

    def __init__(self) -> None:
        self.stack: list[tuple[int, str]] = []
        self.sections: list[Section] = []
        self._blocks: list[str] = []
        self.first_heading: str | None = None

    @property
    def path(self) -> str:
        """The current heading path, ``" > "``-joined (``""`` before any heading)."""
        return " > ".join(t for _, t in self.stack if t)

    def heading(self, level: int, text: str) -> None:
        self.flush()
        text = " ".join(text.split())
        if self.first_heading is None and text:
            self.first_heading = text
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))

    def block(self, text: str) -> tuple[int, int] | None:
        """Add a paragraph; returns a mark for :meth:`retract` (``None`` for a blank one,
        which is ignored)."""
        text = text.strip()
        if not text:
            return None
        self._blocks.append(text)
        return len(self.sections), len(self._blocks)

    def retract(self, mark: tuple[int, int] | None) -> None:
        """Drop the block that returned ``mark`` if nothing came after it (a title
        whose body turned out empty)."""
        if mark is not None and mark == (len(self.sections), len(self._blocks)):
            self._blocks.pop()

    def entry(self, text: str, metadata: JSONObject) -> None:
        """A section of its own under the current heading path."""
        self.flush()
        if text.strip():
            self.sections.append(Section(self.path, text.strip(), metadata))

    def flush(self) -> None:
        if self._blocks:
            self.sections.append(Section(self.path, "\n\n".join(self._blocks)))
            self._blocks = []

    def finish(self) -> tuple[Section, ...]:
        self.flush()
        return tuple(self.sections)
