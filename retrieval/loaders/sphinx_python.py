"""Sphinx's Python domain for docutils: object descriptions as :class:`desc` nodes.

``function``, ``class``, ``method``, ``attribute``, ``data``, ``exception`` ...
and the autodoc forms (``autoclass``, ``autofunction``, ``automodule`` ...,
which carry only a name) become a :class:`desc` node holding the qualified
signature(s) and the parsed body.  Names are qualified the way Sphinx does: by
the current module (``module``/``currentmodule``, a directive's ``:module:``
option, or ``automodule``) and the enclosing class for nested entries
(``.. method:: merge(instance)`` inside ``.. class:: Session`` under
``sqlalchemy.orm`` is ``sqlalchemy.orm.Session.merge``); autodoc's dotted
module-level names are import paths.  On SQLAlchemy 2.0.36's API pages the
names and object types equal those of the ``objects.inv`` Sphinx builds.

An autodoc entry whose name :mod:`~loom.retrieval.loaders.autodoc` finds in the
source (parsed, never imported) is filled in as Sphinx's autodoc fills it: the
signature after the name, the docstring parsed as reST before the content
written in the page, then, for ``:members:`` (``:exclude-members:`` and
``:inherited-members:`` honoured),
one native entry per member, generated as reST and parsed like the page's own
(``.. py:method:: merge(instance, *, load=True, options=None)``), except the
members the page documents itself.  An unresolved name keeps its name-only
entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from docutils import nodes
from docutils.statemachine import StringList

from loom.retrieval.loaders.autodoc import ApiObject, SourceTree, resolve
from loom.retrieval.loaders.sphinx_directives import Base


class desc(nodes.General, nodes.Element):
    """A Python object description: ``object``, ``objtype``, ``module`` attributes,
    a :class:`desc_signature` child, then the body."""


class desc_signature(nodes.General, nodes.FixedTextElement):
    """The qualified signature line(s) of a :class:`desc` (code: no smart quotes)."""


@dataclass
class _PyContext:
    """Where the parser is: the current module and the stack of enclosing
    (module, class path) scopes of nested object descriptions."""

    module: str = ""
    scopes: list[tuple[str, str]] = field(default_factory=list)


def _context(document: nodes.document) -> _PyContext:
    ctx = getattr(document, "_loom_py", None)
    if ctx is None:
        ctx = document._loom_py = _PyContext()
    return ctx


class Module(Base):
    """``module`` and ``currentmodule``: set the module for what follows."""

    def run(self) -> list[nodes.Node]:
        name = self.head()[0]
        _context(self.state.document).module = "" if name == "None" else name
        return []


# Sphinx's py_sig_re, loosened: dotted prefix, name, then anything (params, annotation).
_SIG = re.compile(r"^\s*(?P<prefix>[\w.]*\.)?(?P<name>\w+)(?P<rest>.*)$", re.S)
_MODULE_LEVEL = {"function", "class", "data", "exception", "decorator", "module", "type"}
_SCOPES = {"class", "exception"}
OBJTYPES = {
    "function", "class", "method", "classmethod", "staticmethod", "attribute",
    "property", "data", "exception", "decorator", "decoratormethod", "type",
}
AUTODOC = {
    "autofunction": "function", "autoclass": "class", "automethod": "method",
    "autoattribute": "attribute", "autoproperty": "property", "autodata": "data",
    "autoexception": "exception", "autodecorator": "decorator", "automodule": "module",
    "autoclassmethod": "classmethod", "autostaticmethod": "staticmethod",
}


def qualify(dotted: str, objtype: str, module: str, scope: str, autodoc: bool) -> tuple[str, str]:
    """(qualified name, module) of an entry named ``dotted`` (Sphinx's rules).

    ``scope`` is the enclosing class path relative to ``module``; an autodoc
    module-level name with dots is an import path (its module is the part
    before the last dot).
    """
    if objtype == "module":
        return dotted, dotted
    if autodoc and objtype in _MODULE_LEVEL and "." in dotted and not scope:
        return dotted, dotted.rsplit(".", 1)[0]
    if module and (dotted == module or dotted.startswith(module + ".")):
        return dotted, module
    if scope and dotted.startswith(scope + "."):
        scope = ""
    return ".".join(p for p in (module, scope, dotted) if p), module


_ENTRY = re.compile(r"^\s*\.\.\s+(?:py:)?\w+::\s*([\w.]+)")


def _documented(lines: StringList) -> set[str]:
    """Last name parts of the entries written under an autodoc directive (not
    generated again as members)."""
    return {m[1].rsplit(".", 1)[-1] for m in map(_ENTRY.match, lines) if m}


def _indented(text: str, indent: str) -> list[str]:
    return [indent + line if line.strip() else "" for line in text.splitlines()]


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in re.split(r"[,;]", value) if n.strip())


def _members(tree: SourceTree, obj: ApiObject, options: dict[str, str], skip: set[str],
             indent: str) -> list[str]:
    """``:members:`` as native reST entries (as Sphinx's autodoc generates them), a
    module's classes with their own members."""
    if "members" not in options:
        return []
    skip = skip | set(_names(options.get("exclude-members", "")))
    lines: list[str] = []
    for m in obj.members(tree, _names(options["members"]), "inherited-members" in options):
        if m.name in skip or m.kind == "module":
            continue
        lines += ["", f"{indent}.. py:{m.kind}:: {m.name}{m.signature}", ""]
        lines += _indented(m.docstring, indent + "   ")
        if m.kind == "class" and obj.kind == "module":
            lines += _members(tree, m, {"members": ""}, set(), indent + "   ")
    return lines


class PyObject(Base):
    """A Python object description, native or autodoc, as a :class:`desc` node
    (without a name: just its content)."""

    def run(self) -> list[nodes.Node]:
        base = self.name.split(":")[-1]
        autodoc = base in AUTODOC
        objtype = AUTODOC.get(base, base)
        ctx = _context(self.state.document)
        module, scope = ctx.scopes[-1] if ctx.scopes else (ctx.module, "")
        arg, options, extra = self.head()
        if "module" in options:
            module, scope = options["module"], ""
        lines = [ln.strip() for ln in re.sub(r"\\\n", "", arg).splitlines()]
        if not any(lines):
            return [self.parse_content(nodes.container(), extra)]
        signatures, qualified = [], ""
        for line in filter(None, lines):
            m = _SIG.match(line)
            if not m:
                signatures.append(line)
                continue
            qual, mod = qualify((m["prefix"] or "") + m["name"], objtype, module, scope, autodoc)
            if not qualified:
                qualified, obj_module = qual, mod
            signatures.append(qual + m["rest"].rstrip())
        if not qualified:
            qualified, obj_module = (signatures[0] if signatures else ""), module
        lines = self.body(extra)
        found = autodoc and resolve(self.state.document.get("source"), qualified)
        if found:  # what Sphinx's autodoc imports for, read from the source instead
            tree, obj = found
            if signatures and signatures[0] == qualified:
                signatures[0] += obj.signature
            lines = StringList([*_indented(obj.docstring, ""), "", *lines,
                                *_members(tree, obj, options, _documented(lines), "")])
        sig = "\n".join(signatures)
        node = desc(object=qualified, objtype=objtype, module=obj_module)
        node += desc_signature(sig, sig)
        if objtype == "module":
            ctx.module = qualified  # automodule's py:module directive sets it for what follows
        pushed = objtype in _SCOPES
        if pushed:
            rel = qualified[len(obj_module) + 1:] if obj_module and qualified.startswith(
                obj_module + ".") else qualified
            ctx.scopes.append((obj_module, rel))
        try:
            if lines:
                self.state.nested_parse(lines, self.content_offset, node)
        finally:
            if pushed:
                ctx.scopes.pop()
        return [node]
