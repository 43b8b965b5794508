"""Sphinx's reST vocabulary for plain docutils, without Sphinx.

docutils knows neither Sphinx's directives (``.. function::``,
``.. autoclass::``, ``.. versionadded::``, ``.. code-block::`` ...) nor its
roles (``:func:``, ``:class:``, ``:ref:`` ...), nor a project's own (SQLAlchemy's
``.. changelog::``, ``:paramref:``, ``:ticket:``): left alone it replaces each
with an error message and drops its content.  :func:`sphinx_markup` swaps
docutils' directive and role lookups (``directives.directive``,
``roles.role``) for ones that answer, in this order, from

1. the handlers here, for Sphinx's names with or without the ``py:`` domain;
2. docutils' own registry (admonitions, tables, ``image``, ``math`` ...);
3. a generic handler for any other name, so nothing unknown is lost: a
   directive keeps its argument, its options as ``name: value`` lines and its
   content (parsed as reST); a role keeps its text.

This is the mechanism Sphinx itself uses (``sphinx.util.docutils.sphinx_domains``).
The lookups and docutils' registries are restored on exit and the swap is
serialised by a lock, so docutils is left as it was found.

What the handlers make (:mod:`~loom.retrieval.loaders.sphinx_python`,
:mod:`~loom.retrieval.loaders.sphinx_directives`):

* Python object descriptions (``function``, ``class``, ``method``,
  ``attribute``, ``data``, ``exception``, ``decorator``, ``classmethod``,
  ``staticmethod``, ``property``, ``type``) and the autodoc forms
  (``autoclass``, ``autofunction``, ``automodule`` ...) become a ``desc`` node
  with the qualified name, object type and module; autodoc entries get their
  signature, docstring and members from the parsed source where it is found
  (:mod:`~loom.retrieval.loaders.autodoc`).
* ``versionadded``/``versionchanged``/``deprecated``/``versionremoved`` become
  a ``labelled`` block, "Added in version 3.9: ..." (Sphinx 7.3 wording);
  ``seealso`` becomes "See also: ...".
* ``code-block``/``sourcecode``/``code`` (any options) become literal blocks;
  ``only``/``ifconfig``/``glossary``/``hlist`` keep their content.
* ``toctree``, ``index``, ``include``, ``literalinclude``, ``raw``,
  ``contents``, ``sectnum``, ``highlight``, ``tabularcolumns``, the
  ``*author`` directives produce nothing.
* docutils' own directives accept options they do not declare.
* Roles render as Sphinx shows them (:func:`role_text`): ``:ref:`the guide
  <label>``` is ``the guide``, ``:func:`~random.choices``` is ``choices()``,
  ``:class:`.Session``` is ``Session``, ``:pep:`8``` is ``PEP 8``; docutils'
  typographic roles (emphasis, literal, sub/superscript, math, abbr) stay
  docutils'.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from docutils import nodes, utils
from docutils.parsers.rst import Directive, directives, roles

from loom.retrieval.loaders.sphinx_directives import (VERSION_LABELS, Code, Content, Generic, Null,
                                                 SeeAlso, VersionNote, lenient)
from loom.retrieval.loaders.sphinx_python import AUTODOC, OBJTYPES, Module, PyObject

# -- roles ------------------------------------------------------------------

_EXPLICIT_TITLE = re.compile(r"^(.+?)\s*(?<!\x00)<(.*?)>$", re.S)
_PARENS = {"func", "meth"}


def role_text(name: str, text: str) -> str:
    """What Sphinx shows for ``:name:`text``` (``text`` with docutils' ``\\x00`` escapes)."""
    base = name.lower().split(":")[-1]
    m = _EXPLICIT_TITLE.match(text)
    if m:
        return " ".join(utils.unescape(m.group(1)).split())
    shown = " ".join(utils.unescape(text).split())
    if base in ("pep", "rfc"):
        return f"{base.upper()} {shown.split('#')[0]}"
    shown = shown.lstrip("!").lstrip(".")
    if shown.startswith("~"):
        shown = shown[1:].lstrip(".").rsplit(".", 1)[-1]
    if base in _PARENS and shown and not shown.endswith(")"):
        shown += "()"
    return shown


def _text_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
               options: dict | None = None, content: list | None = None
               ) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    return [nodes.literal(rawtext, role_text(name, text))], []


# -- the namespace ----------------------------------------------------------

_DIRECTIVES: dict[str, type[Directive]] = {
    **{n: PyObject for n in (*OBJTYPES, *AUTODOC)},
    "module": Module, "currentmodule": Module,
    **{n: VersionNote for n in VERSION_LABELS},
    "seealso": SeeAlso,
    **{n: Code for n in ("code-block", "sourcecode", "code", "doctest", "testcode",
                         "testoutput", "testsetup", "testcleanup")},
    **{n: Content for n in ("only", "ifconfig", "glossary", "hlist")},
    **{n: Null for n in ("toctree", "index", "include", "literalinclude", "raw", "contents",
                         "sectnum", "highlight", "tabularcolumns", "sectionauthor",
                         "moduleauthor", "codeauthor", "default-domain", "default-role",
                         "rst-class", "meta", "cssclass")},
}
# docutils' roles that render right stay theirs (emphasis, literal, sub, sup, math, abbr ...)
_DOCUTILS_ROLES = {"", "emphasis", "strong", "literal", "code", "subscript", "sub",
                   "superscript", "sup", "title-reference", "title", "t", "math",
                   "abbreviation", "abbr", "ab", "acronym", "ac"}

_lock = threading.Lock()


def _strip_domain(name: str) -> str:
    key = name.lower()
    return key[3:] if key.startswith("py:") else key


@contextmanager
def sphinx_markup() -> Iterator[None]:
    """Parse reST inside this block with Sphinx's vocabulary (see the module docstring)."""
    with _lock:
        saved = (directives.directive, roles.role,
                 dict(directives._directives), dict(roles._roles))
        lookup_directive, lookup_role = saved[0], saved[1]

        def directive(name: str, language: Any, document: nodes.document
                      ) -> tuple[type[Directive], list[nodes.system_message]]:
            handler = _DIRECTIVES.get(_strip_domain(name))
            if handler:
                return handler, []
            found, messages = lookup_directive(name, language, document)
            return (lenient(found), messages) if found else (Generic, [])

        def role(name: str, language: Any, lineno: int, reporter: Any) -> tuple[Any, list]:
            if name.lower() in _DOCUTILS_ROLES:
                return lookup_role(name, language, lineno, reporter)
            return _text_role, []

        directives.directive, roles.role = directive, role
        try:
            yield
        finally:
            directives.directive, roles.role = saved[0], saved[1]
            directives._directives.clear()
            directives._directives.update(saved[2])
            roles._roles.clear()
            roles._roles.update(saved[3])
