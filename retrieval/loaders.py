"""File loaders: plain text, Markdown, reStructuredText and HTML to :class:`Document`.

Markup is stripped by the format's own library (markdown-it-py, docutils,
BeautifulSoup) rather than by regexes, and the heading structure is kept: each
document becomes a list of sections, each under its heading path
(``"Usage > Options"``), so chunks can carry their section as metadata.

``load_path`` walks folders with glob patterns (sorted, so ingestion order and
therefore chunk positions are deterministic) and dispatches on the suffix.
The ``stdlib:`` pseudo-path is handled by :mod:`retrieval.stdlib`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from retrieval.types import Document, Section

logger = logging.getLogger(__name__)

DEFAULT_PATTERNS: tuple[str, ...] = (
    "**/*.txt", "**/*.md", "**/*.markdown", "**/*.rst", "**/*.html", "**/*.htm",
)


class _SectionBuilder:
    """Collects text blocks under a stack of headings."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, str]] = []
        self.sections: list[Section] = []
        self._blocks: list[str] = []
        self.first_heading: str | None = None

    def heading(self, level: int, text: str) -> None:
        self.flush()
        text = " ".join(text.split())
        if self.first_heading is None and text:
            self.first_heading = text
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))

    def block(self, text: str) -> None:
        text = text.strip()
        if text:
            self._blocks.append(text)

    def flush(self) -> None:
        if self._blocks:
            path = " > ".join(t for _, t in self.stack if t)
            self.sections.append(Section(path, "\n\n".join(self._blocks)))
            self._blocks = []

    def finish(self) -> tuple[Section, ...]:
        self.flush()
        return tuple(self.sections)


def load_text(text: str, doc_id: str, title: str | None = None) -> Document:
    """Plain text: one section; the title is the first non-empty line."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    sections = (Section("", text.strip()),) if text.strip() else ()
    return Document(doc_id, title or first[:200] or doc_id, sections, source=doc_id)


def load_markdown(text: str, doc_id: str, title: str | None = None) -> Document:
    """Markdown (CommonMark + tables) parsed with markdown-it-py.

    Headings start sections; paragraphs, list items, tables and code blocks
    become text blocks (code kept verbatim, inline markup dropped).
    """
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    sb = _SectionBuilder()
    heading_level: int | None = None
    for tok in tokens:
        if tok.type == "heading_open":
            heading_level = int(tok.tag[1:])
        elif tok.type == "inline":
            plain = "".join(
                c.content if c.type in ("text", "code_inline") else
                "\n" if c.type in ("softbreak", "hardbreak") else ""
                for c in tok.children or ()
            )
            if heading_level is not None:
                sb.heading(heading_level, plain)
                heading_level = None
            else:
                sb.block(plain)
        elif tok.type in ("fence", "code_block"):
            sb.block(tok.content)
    return Document(doc_id, title or sb.first_heading or Path(doc_id).stem, sb.finish(),
                    source=doc_id)


def load_rst(text: str, doc_id: str, title: str | None = None) -> Document:
    """reStructuredText parsed with docutils (errors reported, never raised).

    docutils promotes a lone top-level section title to the document title;
    nested ``section`` nodes give the heading path.
    """
    from docutils import nodes
    from docutils.core import publish_doctree

    tree = publish_doctree(text, settings_overrides={
        "report_level": 5, "halt_level": 5, "file_insertion_enabled": False,
        "raw_enabled": False, "warning_stream": False,
    })
    sb = _SectionBuilder()
    doc_title = next((n.astext() for n in tree.children if isinstance(n, nodes.title)), None)

    def walk(node: nodes.Node, depth: int) -> None:
        for child in node.children:
            if isinstance(child, nodes.section):
                titles = [c for c in child.children if isinstance(c, nodes.title)]
                sb.heading(depth, titles[0].astext() if titles else "")
                walk(child, depth + 1)
            elif isinstance(child, (nodes.title, nodes.system_message, nodes.comment)):
                continue
            elif isinstance(child, (nodes.Element, nodes.Text)):
                sb.block(child.astext())

    if doc_title:  # the promoted title heads every section, as an h1 does in Markdown
        sb.heading(0, doc_title)
    walk(tree, 1)
    return Document(doc_id, title or doc_title or sb.first_heading or Path(doc_id).stem,
                    sb.finish(), source=doc_id)


_HEADING_MARK = "\x00H"


def load_html(text: str, doc_id: str, title: str | None = None) -> Document:
    """HTML parsed with BeautifulSoup (stdlib ``html.parser`` backend).

    Scripts, styles and navigation are dropped; each ``<h1>``..``<h6>`` is
    replaced by a marker so one ``get_text`` pass yields text and headings in
    document order.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    html_title = soup.title.get_text(" ", strip=True) if soup.title else None
    for tag in soup(["script", "style", "noscript", "nav", "head", "template"]):
        tag.decompose()
    for h in soup.find_all(re.compile(r"^h[1-6]$")):
        h.replace_with(f"\n{_HEADING_MARK}{h.name[1]}\x00{h.get_text(' ', strip=True)}\n")
    sb = _SectionBuilder()
    para: list[str] = []
    for line in soup.get_text("\n").splitlines():
        if line.startswith(_HEADING_MARK):
            sb.block("\n".join(para))
            para = []
            level, _, head = line[len(_HEADING_MARK):].partition("\x00")
            sb.heading(int(level), head)
        elif line.strip():
            para.append(" ".join(line.split()))
        elif para:
            sb.block("\n".join(para))
            para = []
    sb.block("\n".join(para))
    return Document(doc_id, title or html_title or sb.first_heading or Path(doc_id).stem,
                    sb.finish(), source=doc_id)


LOADERS: dict[str, Callable[[str, str], Document]] = {
    ".txt": load_text, ".text": load_text,
    ".md": load_markdown, ".markdown": load_markdown,
    ".rst": load_rst, ".rest": load_rst,
    ".html": load_html, ".htm": load_html,
}


def load_file(path: str | Path) -> Document:
    """Load one file with the loader for its suffix (unknown suffixes: plain text).

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
                    metadata={"format": p.suffix.lower().lstrip(".") or "txt"})


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


def load_path(path: str, patterns: Iterable[str] = DEFAULT_PATTERNS) -> Iterator[Document]:
    """Documents from a file, a folder (walked with ``patterns``) or ``stdlib:...``.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: unknown ``stdlib:`` part.
    """
    if path.startswith("stdlib:"):
        from retrieval.stdlib import load_stdlib

        yield from load_stdlib(path[len("stdlib:"):])
        return
    for f in iter_files(path, tuple(patterns)):
        try:
            yield load_file(f)
        except ValueError as exc:
            logger.warning("skipping %s: %s", f, exc)
