"""HTML to a :class:`Document`: the page's main content only.

Parsed with BeautifulSoup (stdlib ``html.parser`` backend).  Documentation
sites are built by a few known tools, so the main content is found by their
markup rather than by a readability heuristic (trafilatura, readability-lxml
guess from text density, may drop short reference entries or code, and pull
in several more dependencies): the first element matching
:data:`MAIN_SELECTORS` (MkDocs Material's ``article.md-content__inner``,
``[role=main]``, ``<main>``, Sphinx's ``div.body`` then ``div.document``,
``<article>``), else ``<body>``.  Inside it, :data:`CHROME_SELECTORS` are
removed: ``nav``, ``header``, ``footer``, ``aside`` (but not docutils' own
``aside.topic``/``aside.footnote-list``...), Sphinx's sidebars, related bars
and ``headerlink`` anchors, breadcrumbs, tables of contents, theme sidebars,
prev/next buttons, search boxes; scripts, styles and forms go everywhere.

The walk keeps document order: each ``<h1>``..``<h6>`` starts a section
(heading path as in Markdown), each block element (``p``, ``li``, ``dd`` ...)
is a text block with whitespace collapsed, ``<pre>`` is kept verbatim, and a
table is one block of rows with cells joined by ``" | "``.  A Sphinx object
description (``<dl class="py method">``, its ``dt`` id the qualified name) is
a section of its own, as in :mod:`~loom.retrieval.loaders.rst`: the signature with
the qualified name, then the body; metadata ``object`` (the id), ``objtype``
(the ``dl`` class), ``module`` (the enclosing entry's; at top level the last
``module-<name>`` target when it prefixes the name, else the name up to its
last dot).  Members nested in a class follow the class's section.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from loom.retrieval.loaders.sections import SectionBuilder
from loom.retrieval.types import Document

MAIN_SELECTORS: tuple[str, ...] = (
    "article.md-content__inner", "[role=main]", "main", "div.body", "div.document", "article",
)
CHROME_SELECTORS: tuple[str, ...] = (
    "nav", "header", "footer", "aside:not(.topic):not(.footnote-list):not(.footnote)"
    ":not(.citation-list):not(.sidebar):not(.admonition)",
    "[role=navigation]", "[role=banner]", "[role=contentinfo]", "[role=search]",
    ".sphinxsidebar", ".related", ".headerlink", ".breadcrumb", ".breadcrumbs",
    "[aria-label=breadcrumbs]", ".toc", "#toc", "div.contents.topic", "aside.contents",
    ".table-of-contents", ".md-sidebar", ".md-header", ".md-footer", ".md-tabs",
    ".md-source-file", ".md-content__button", ".wy-nav-side", ".rst-footer-buttons",
    ".bd-sidebar-primary", ".bd-sidebar-secondary", ".bd-header-article", ".prev-next-area",
    ".toc-drawer", ".sidebar-drawer", "#searchbox", ".skip-link", ".footer",
)
_DROP_TAGS = ["script", "style", "noscript", "template", "svg", "form", "button", "head",
              "iframe", "link", "meta"]
_BLOCK_TAGS = {
    "p", "div", "section", "article", "main", "body", "li", "ul", "ol", "dl", "dt", "dd",
    "blockquote", "figure", "figcaption", "details", "summary", "hr", "address", "caption",
    "center", "fieldset", "aside", "header", "footer", "nav", "tr", "td", "th",
}
_HEADING = re.compile(r"^h([1-6])$")


def load_html(text: str, doc_id: str, title: str | None = None) -> Document:
    """HTML (a documentation page) to a Document of its main content.

    The title is the page's ``<title>``, else its first heading.  Never raises
    on malformed HTML.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    html_title = soup.title.get_text(" ", strip=True) if soup.title else None
    for tag in soup(_DROP_TAGS):
        tag.decompose()
    main = next((m for sel in MAIN_SELECTORS for m in soup.select(sel, limit=1)), None)
    main = main or soup.body or soup
    for sel in CHROME_SELECTORS:
        for tag in main.select(sel):
            if tag is not main and not tag.decomposed:
                tag.decompose()
    walker = _Walker()
    walker.walk(main)
    walker.flush()
    sb = walker.sb
    return Document(doc_id, title or html_title or sb.first_heading or Path(doc_id).stem,
                    sb.finish(), source=doc_id)


class _Walker:
    """Depth-first walk that collects inline text until a block boundary."""

    def __init__(self) -> None:
        self.sb = SectionBuilder()
        self.inline: list[str] = []
        self.module = ""  # the last Sphinx ``module-<name>`` target seen

    def flush(self) -> None:
        self.sb.block(" ".join("".join(self.inline).split()))
        self.inline = []

    def walk(self, el: Any) -> None:
        from bs4 import NavigableString, Tag

        for child in el.children:
            if type(child) is NavigableString:  # not a Comment, Doctype, CData ...
                self.inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            level = _HEADING.match(name)
            anchor = str(child.get("id", ""))
            if anchor.startswith("module-"):
                self.module = anchor[len("module-"):]
            if name == "dl" and _entry_name(child):
                self.flush()
                self.entry(child, "")
            elif level:
                self.flush()
                self.sb.heading(int(level[1]), " ".join(child.get_text().split()))
            elif name == "pre":
                self.flush()
                self.sb.block(child.get_text())
            elif name == "table":
                self.flush()
                self.sb.block(_table(child))
            elif name == "br":
                self.inline.append(" ")
            elif name in _BLOCK_TAGS:
                self.flush()
                self.walk(child)
                self.flush()
            else:
                self.walk(child)


    def entry(self, dl: Any, parent_module: str) -> None:
        """A Sphinx object description (``dl.py``) as a section of its own, then the
        entries nested in its body (a class's members)."""
        obj = _entry_name(dl)
        nested = [d for d in dl.find_all("dl") if _entry_name(d)
                  and d.find_parent(lambda t: t.name == "dl" and _entry_name(t)) is dl]
        for d in nested:
            d.extract()
        if parent_module:
            module = parent_module
        elif self.module and obj.startswith(self.module + "."):
            module = self.module
        else:
            module = obj.rsplit(".", 1)[0] if "." in obj else ""
        sig = "\n".join(_signature(dt, obj) for dt in dl.find_all("dt", recursive=False))
        body = [_flat_blocks(dd) for dd in dl.find_all("dd", recursive=False)]
        objtype = next((c for c in dl.get("class", []) if c != "py"), "")
        self.sb.entry("\n\n".join(t for t in (sig, *body) if t),
                      {"object": obj, "objtype": objtype, "module": module})
        for d in nested:
            self.entry(d, module)


def _signature(dt: Any, obj: str) -> str:
    """A ``dt``'s signature with the object's qualified name in place of the shown one
    (``classmethod close_all() → None`` -> ``classmethod pkg.Cls.close_all() → None``)."""
    text = " ".join(dt.get_text().split())
    name = dt.find(class_="sig-name")
    shown = " ".join(name.get_text().split()) if name else ""
    at = text.find(shown) if shown else -1
    if at < 0 or not obj.endswith(shown):
        return text
    prename = dt.find(class_="sig-prename")
    head = text[:at].replace(" ".join(prename.get_text().split()), "") if prename else text[:at]
    return f"{head}{obj}{text[at + len(shown):]}"


def _entry_name(dl: Any) -> str:
    """The object a Sphinx ``<dl class="py ...">`` describes (its ``dt`` id), or ``""``."""
    if dl.name != "dl" or "py" not in dl.get("class", []):
        return ""
    dt = dl.find("dt", recursive=False)
    return str(dt.get("id", "")) if dt is not None else ""


def _table(table: Any) -> str:
    rows = []
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue  # a nested table's rows are text of their cell
        cells = [_flat(c) for c in tr.find_all(["td", "th"], recursive=False)]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _flat_blocks(el: Any) -> str:
    """The text of ``el``, blocks separated by blank lines."""
    walker = _Walker()
    walker.walk(el)
    walker.flush()
    return "\n\n".join(s.text for s in walker.sb.finish())


def _flat(el: Any) -> str:
    """The text of ``el`` on one line, blocks separated by a space."""
    return " ".join(_flat_blocks(el).split())
