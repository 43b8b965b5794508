"""reStructuredText (plain or Sphinx) to a :class:`Document`, parsed by docutils.

The source is parsed by docutils inside :func:`loom.retrieval.loaders.sphinx.sphinx_markup`
(Sphinx's directives and roles, and a generic handler for every unknown name),
then the doctree is turned into sections:

* ``section`` nodes give the heading path; docutils promotes a lone top-level
  title to the document title, which then heads every path
  (``"Session API > Session Utilities"``).
* each Python object description (``desc``) is a section of its own under the
  enclosing heading path: its qualified signature(s), then its body; metadata
  ``{"object", "objtype", "module"}``.  A class's entry comes before those of
  the members nested in it; text after an entry starts a new section under the
  same heading, so document order is kept.  Autodoc entries are filled from
  the documented package's source, found from the page's path ``doc_id``
  (:mod:`~loom.retrieval.loaders.autodoc`), and their members are entries too.
* everything else is rendered to text by :func:`render`, which never emits
  parser output: ``system_message`` and comment nodes are skipped, a
  ``problematic`` node (an undefined ``|substitution|``, an unknown target)
  keeps only the source words it stood for.  Admonitions and version notes
  keep their label ("Note: ...", "Added in version 3.9: ..."), tables are rows
  of cells joined by ``" | "``, fields are ``"name: body"``.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

from loom.retrieval.loaders.sections import SectionBuilder
from loom.retrieval.loaders.sphinx import role_text, sphinx_markup
from loom.retrieval.loaders.sphinx_directives import labelled
from loom.retrieval.loaders.sphinx_python import desc
from loom.retrieval.types import Document

_SETTINGS = {
    "report_level": 5, "halt_level": 5, "warning_stream": False, "traceback": True,
    "file_insertion_enabled": False, "raw_enabled": False, "syntax_highlight": "none",
    "smart_quotes": True, "input_encoding": "unicode", "language_code": "en",
}
_SKIP = (nodes.system_message, nodes.comment, nodes.substitution_definition, nodes.docinfo,
         nodes.pending, nodes.raw, nodes.transition, nodes.image, nodes.label)
_SUBSTITUTION = re.compile(r"^\|[^|]+\|_{0,2}$")
_ROLE = re.compile(r"^:(?P<name>[\w.:+-]+):`(?P<text>.*)`$", re.S)


def load_rst(text: str, doc_id: str, title: str | None = None) -> Document:
    """reStructuredText, with Sphinx's directives and roles, to a Document.

    Never raises on markup: docutils' errors become ``system_message`` nodes,
    which are not rendered.
    """
    from docutils.core import publish_doctree

    with sphinx_markup():
        tree = publish_doctree(text, source_path=doc_id, settings_overrides=_SETTINGS)
    sb = SectionBuilder()
    doc_title = next((render(n) for n in tree.children if isinstance(n, nodes.title)), None)
    if doc_title:  # the promoted title heads every section, as an h1 does in Markdown
        sb.heading(0, doc_title)
    _walk(tree, 1, sb)
    return Document(doc_id, title or doc_title or sb.first_heading or Path(doc_id).stem,
                    sb.finish(), source=doc_id)


def _holds_structure(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Element) and not isinstance(node, (nodes.TextElement, desc)) \
        and node.next_node(lambda n: isinstance(n, (nodes.section, desc))) is not None


def _walk(node: nodes.Element, depth: int, sb: SectionBuilder) -> None:
    for child in node.children:
        if isinstance(child, nodes.section):
            titles = [c for c in child.children if isinstance(c, nodes.title)]
            sb.heading(depth, render(titles[0]) if titles else "")
            _walk(child, depth + 1, sb)
        elif isinstance(child, desc):
            _entry(child, sb)
        elif isinstance(child, nodes.title) or isinstance(child, _SKIP):
            continue
        elif _holds_structure(child):  # a container with entries or sections inside
            _walk(child, depth, sb)
        else:
            sb.block(render(child))


def _entry(node: desc, sb: SectionBuilder) -> None:
    """One object description as a section, then the entries nested in it."""
    blocks: list[str] = []
    nested: list[desc] = []
    _split(node.children, blocks, nested)
    meta = {"object": node["object"], "objtype": node["objtype"], "module": node["module"]}
    sb.entry("\n\n".join(b for b in blocks if b.strip()), meta)
    for n in nested:
        _entry(n, sb)


def _split(children: list[nodes.Node], blocks: list[str], nested: list[desc]) -> None:
    """An entry's own text blocks, and the entries nested in it (also inside containers)."""
    for c in children:
        if isinstance(c, desc):
            nested.append(c)
        elif _holds_structure(c):
            _split(c.children, blocks, nested)
        elif not isinstance(c, _SKIP):
            blocks.append(render(c))


_LABELS = {cls: cls.__name__.capitalize() for cls in (
    nodes.attention, nodes.caution, nodes.danger, nodes.error, nodes.hint, nodes.important,
    nodes.note, nodes.tip, nodes.warning)}


def render(node: nodes.Node) -> str:
    """Plain text of a doctree node, without parser messages."""
    if isinstance(node, nodes.Text):
        return node.astext()
    if isinstance(node, _SKIP):
        return ""
    if isinstance(node, nodes.problematic):
        return _problematic(node.astext())
    if isinstance(node, (nodes.literal_block, nodes.doctest_block)):
        return node.astext()
    if isinstance(node, nodes.TextElement):
        return "".join(render(c) for c in node.children)
    if isinstance(node, nodes.table):
        rows = [" | ".join(" ".join(render(e).split()) for e in row.children)
                for row in node.findall(nodes.row)]
        titles = [render(c) for c in node.children if isinstance(c, nodes.title)]
        return "\n".join(r for r in titles + rows if r.strip(" |"))
    if isinstance(node, nodes.field):
        name, body = node.children[0], node.children[1:]
        return f"{render(name)}: {_blocks(body)}".strip()
    if isinstance(node, nodes.definition_list_item):
        return "\n".join(filter(None, (render(c) for c in node.children)))
    if isinstance(node, nodes.line_block):
        return "\n".join(render(c) for c in node.children)
    body = _blocks(node.children)
    label = _LABELS.get(type(node)) or (node.get("label") if isinstance(node, labelled) else None)
    if label:
        return f"{label}: {body}" if body else f"{label}."
    return body


def _blocks(children: list[nodes.Node]) -> str:
    return "\n\n".join(t for t in (render(c).strip() for c in children) if t)


def _problematic(raw: str) -> str:
    """The words a failed construct stood for (never the markup or the message)."""
    if _SUBSTITUTION.match(raw):
        return ""
    m = _ROLE.match(raw)
    if m:
        return role_text(m["name"], m["text"])
    return raw.strip("`").rstrip("_") if raw.endswith("_") else raw

