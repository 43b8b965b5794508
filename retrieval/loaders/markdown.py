"""Markdown to a :class:`Document`, read the way MkDocs sites are written.

Parsed by markdown-it-py (CommonMark + tables) with mdit-py-plugins:

* ``front_matter_plugin``: a leading YAML block is not text; its ``title`` is
  the document title, other scalar fields (and lists of scalars) go to
  ``Document.metadata``; layout keys (``hide``, ``template`` ...) are dropped.
* ``admon_plugin``: Python-Markdown / MkDocs admonitions ``!!! note "Title"``
  and collapsibles ``??? tip``; pymdownx content tabs ``=== "Python 3.9+"``
  are read as admonitions titled by the tab (the line is rewritten to
  ``!!! tab "Python 3.9+"`` before parsing; the indented body is the same).
* ``container_plugin`` with marker ``/``: pymdownx blocks ``/// note | Title``
  ... ``///`` (FastAPI's docs), nested with longer markers (``//// tab``).

Headings start sections; paragraphs, list items and code become text blocks
(code verbatim, inline markup dropped); a table is one block of rows with
cells joined by ``" | "``; an admonition or block keeps its title (the type,
capitalised, when it has none) and body, without markers, and a title whose
body is empty (a tab that only held a snippet) is dropped.  What MkDocs
replaces before rendering is not text: snippet includes (``{* file hl[3] *}``,
``{! file !}``, ``--8<-- "file"``), Jinja macros (``{% ... %}``, ``{{ ... }}``)
and attribute lists (``{ #anchor }``, ``{.internal-link target=_blank}``);
include lines are also removed from code fences.  Raw HTML blocks keep their
text (BeautifulSoup), without scripts and styles.  A MyST role (Sphinx's
Markdown: ``{func}`click.echo```, ``{ref}`title <label>```) is shown as Sphinx
shows it (``click.echo()``, ``title``), not as ``{func}click.echo``: Click's
docs hold about 350 of them, and a small model shown them copied the braces
into its answers ("use the {func}password_option function").
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject
from loom.retrieval.loaders.sections import SectionBuilder
from loom.retrieval.types import Document

logger = logging.getLogger(__name__)

_TAB = re.compile(r'^(?P<indent>[ \t]*)===[+!]*[ \t]+(?P<title>"[^"\n]*")[ \t]*$', re.M)
_BLOCK = re.compile(r"^\s*(?P<name>[A-Za-z][\w-]*)\s*(?:\|\s*(?P<title>.*?))?\s*$")
_INCLUDE = re.compile(r'\{\*[^\n]*?\*\}|\{![^\n]*?!\}|^-{1,2}8<-{1,2}[ \t]*(?:"[^"\n]*")?[ \t]*$',
                      re.M)
_TEMPLATE = re.compile(r"\{%.*?%\}|\{\{.*?\}\}", re.S)
# a MyST role's name right before its code span: ``{func}`` of ``{func}`click.echo```, ``{py:meth}`` ...
_MYST_ROLE = re.compile(r"\{(?P<role>[A-Za-z][\w.+-]*(?::[A-Za-z][\w.+-]*)*)\}$")
_ATTR_LIST = re.compile(r"[ \t]*\{:?[ \t]*[#.][^{}\n]*\}")
_HTML_BLOCK_TAG = re.compile(
    r"</?(?:table|thead|tbody|tfoot|tr|td|th|details|summary|div|p|br|li|ul|ol|dl|dt|dd|hr)\b", re.I)
_LAYOUT_KEYS = {"hide", "template", "search", "icon", "status", "comments", "include_yaml"}


@functools.cache
def _parser() -> Any:
    from markdown_it import MarkdownIt
    from mdit_py_plugins.admon import admon_plugin
    from mdit_py_plugins.container import container_plugin
    from mdit_py_plugins.front_matter import front_matter_plugin

    md = MarkdownIt("commonmark").enable("table")
    md.use(front_matter_plugin).use(admon_plugin)
    md.use(container_plugin, "block", marker="/",
           validate=lambda params, *_: _BLOCK.match(params) is not None)
    return md


def load_markdown(text: str, doc_id: str, title: str | None = None) -> Document:
    """Markdown (MkDocs dialect, see the module docstring) to a Document.

    Never raises on markup; front matter that is not a YAML mapping is ignored.
    """
    tokens = _parser().parse(_TAB.sub(r"\g<indent>!!! tab \g<title>", text))
    sb = SectionBuilder()
    meta: JSONObject = {}
    fm_title: str | None = None
    heading_level: int | None = None
    in_title = False
    opened: list[tuple[int, int] | None] = []  # title marks of open admonitions/blocks
    rows: list[str] | None = None
    row: list[str] | None = None
    for tok in tokens:
        kind = tok.type
        if kind == "front_matter":
            fm_title, meta = _front_matter(tok.content)
        elif kind == "heading_open":
            heading_level = int(tok.tag[1:])
        elif kind == "inline":
            plain = _inline(tok)
            if heading_level is not None:
                sb.heading(heading_level, plain)
                heading_level = None
            elif row is not None:
                row.append(" ".join(plain.split()))
            elif in_title:
                opened[-1] = sb.block(plain)
            else:
                sb.block(plain)
        elif kind in ("fence", "code_block"):
            sb.block("\n".join(ln for ln in tok.content.splitlines()
                               if not _INCLUDE.fullmatch(ln.strip())))
        elif kind == "html_block":
            sb.block(_html_text(tok.content))
        elif kind == "admonition_open":
            opened.append(None)
        elif kind in ("admonition_title_open", "admonition_title_close"):
            in_title = kind == "admonition_title_open"
        elif kind == "container_block_open":
            m = _BLOCK.match(tok.info)
            head = (m["title"] or m["name"].capitalize()) if m else ""
            opened.append(sb.block("".join(_inline(t) for t in _parser().parseInline(head))))
        elif kind in ("admonition_close", "container_block_close") and opened:
            sb.retract(opened.pop())
        elif kind == "table_open":
            rows = []
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close" and rows is not None and row is not None:
            rows.append(" | ".join(row))
            row = None
        elif kind == "table_close" and rows is not None:
            sb.block("\n".join(rows))
            rows = None
    return Document(doc_id, title or fm_title or sb.first_heading or Path(doc_id).stem,
                    sb.finish(), source=doc_id, metadata=meta)


def _clean(text: str) -> str:
    """Prose without MkDocs' pre-render markup (includes, macros, attribute lists)."""
    return _ATTR_LIST.sub("", _TEMPLATE.sub("", _INCLUDE.sub("", text)))


def _inline(tok: Any) -> str:
    parts = []
    role = None  # a MyST role (``{func}`click.echo```) whose text is the next code span
    for c in tok.children or ():
        if c.type == "text":
            text = _clean(c.content)
            m = _MYST_ROLE.search(text)
            role = m.group("role") if m else None
            parts.append(text[:m.start()] if m else text)
            continue
        if c.type == "code_inline":
            parts.append(_role_text(role, c.content) if role else c.content)
        elif c.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif c.type == "html_inline" and _HTML_BLOCK_TAG.match(c.content):
            parts.append(" ")  # a table or list written in HTML inside a cell
        role = None
    return "".join(parts)


def _role_text(role: str, text: str) -> str:
    """What Sphinx shows for the MyST role ``{role}`text``` (``loom.retrieval.loaders.sphinx.role_text``, as
    for reST's ``:role:`text```): ``{func}`click.echo``` is ``click.echo()``, ``{ref}`the options <options>```
    is ``the options``."""
    from loom.retrieval.loaders.sphinx import role_text

    return role_text(role, text)


def _html_text(html: str) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "template"]):
        tag.decompose()
    return " ".join(_clean(soup.get_text(" ")).split())


def _scalar(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return None


def _front_matter(content: str) -> tuple[str | None, JSONObject]:
    """(title, metadata) of a YAML front matter block; ``(None, {})`` if it is not a mapping."""
    import yaml

    try:
        data = yaml.safe_load(content)
    except yaml.YAMLError as exc:
        logger.debug("front matter is not YAML: %s", exc)
        return None, {}
    if not isinstance(data, dict):
        return None, {}
    title = data.get("title")
    meta: JSONObject = {}
    for key, value in data.items():
        if key == "title" or key in _LAYOUT_KEYS:
            continue
        if isinstance(value, list):
            items = [_scalar(v) for v in value]
            value = items if items and all(v is not None for v in items) else None
        else:
            value = _scalar(value)
        if value is not None:
            meta[str(key)] = value
    return (str(title).strip() or None) if title is not None else None, meta
