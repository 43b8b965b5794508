"""File loaders: plain text, Markdown, reStructuredText and HTML to :class:`Document`.

One module per format, each stripping markup with the format's own library,
never with a hand-written parser, and keeping the heading structure: a
document is a list of sections, each under its heading path
(``"Usage > Options"``), so chunks carry their section as metadata.

* :mod:`~loom.retrieval.loaders.text` — plain text, one section.
* :mod:`~loom.retrieval.loaders.markdown` — markdown-it-py with mdit-py-plugins, as
  MkDocs sites are written (front matter, admonitions, ``///`` blocks, content
  tabs, tables; snippet markers dropped).
* :mod:`~loom.retrieval.loaders.rst` — docutils with Sphinx's directives and roles
  registered (:mod:`~loom.retrieval.loaders.sphinx`); each Python object entry is a
  section of its own with ``object``/``objtype``/``module`` metadata.
* :mod:`~loom.retrieval.loaders.html` — BeautifulSoup, main content only (no
  navigation, header, footer or sidebars); Sphinx-built object entries are
  sections of their own, as in reST.

``load_path`` walks folders with glob patterns (sorted, so ingestion order and
therefore chunk positions are deterministic), dispatches on the suffix, and
reports and skips a file that fails to load.  The ``stdlib:`` pseudo-path is
handled by :mod:`loom.retrieval.stdlib`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from loom.retrieval.loaders.html import load_html
from loom.retrieval.loaders.markdown import load_markdown
from loom.retrieval.loaders.rst import load_rst
from loom.retrieval.loaders.text import load_text
from loom.retrieval.types import Document

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_PATTERNS", "LOADERS", "iter_files", "load_file", "load_html",
           "load_markdown", "load_path", "load_rst", "load_text"]

DEFAULT_PATTERNS: tuple[str, ...] = (
    "**/*.txt", "**/*.md", "**/*.markdown", "**/*.rst", "**/*.html", "**/*.htm",
)

LOADERS: dict[str, Callable[[str, str], Document]] = {
    ".txt": load_text, ".text": load_text,
    ".md": load_markdown, ".markdown": load_markdown,
    ".rst": load_rst, ".rest": load_rst,
    ".html": load_html, ".htm": load_html,
}


def load_file(path: str | Path) -> Document:
    """Load one file with the loader for its suffix (unknown suffixes: plain text).

    The document's metadata is the loader's (Markdown front matter fields)
    plus ``format``, the suffix without its dot.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not UTF-8 text.
    """
    p = Path(path).resolve()
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"path: {p} is not UTF-8 text ({exc.reason})") from exc
    loader = LOADERS.get(p.suffix.lower(), load_text)
    doc = loader(text, str(p))
    return Document(doc.id, doc.title, doc.sections, source=str(p),
                    metadata={**doc.metadata, "format": p.suffix.lower().lstrip(".") or "txt"})


def iter_files(path: str | Path, patterns: Iterable[str] = DEFAULT_PATTERNS) -> list[Path]:
    """Files under ``path`` matching any glob pattern, sorted; a file is itself.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"path: {path} does not exist")
    found = {f for pat in patterns for f in p.glob(pat) if f.is_file()}
    return sorted(found)


def _reason(exc: BaseException) -> str:
    """``"ExcType: first line of the message"``, at most 300 characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def load_path(path: str, patterns: Iterable[str] = DEFAULT_PATTERNS,
              failures: list[tuple[str, str]] | None = None) -> Iterator[Document]:
    """Documents from a file, a folder (walked with ``patterns``) or ``stdlib:...``.

    A file that fails to load (any exception: not UTF-8, a loader bug) is
    logged as a warning and skipped; when ``failures`` is a list, ``(resolved
    path, "ExcType: one-line reason")`` is appended to it, and the walk goes on.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: unknown ``stdlib:`` part.
    """
    if path.startswith("stdlib:"):
        from loom.retrieval.stdlib import load_stdlib

        yield from load_stdlib(path[len("stdlib:"):])
        return
    for f in iter_files(path, tuple(patterns)):
        try:
            doc = load_file(f)
        except Exception as exc:  # one bad file must not end the walk
            reason = _reason(exc)
            logger.warning("skipping %s: %s", f, reason)
            if failures is not None:
                failures.append((str(Path(f).resolve()), reason))
            continue
        yield doc
