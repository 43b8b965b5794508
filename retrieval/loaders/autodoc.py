"""Static autodoc: what Sphinx's autodoc would fill in, read from the source with ``ast``.

``.. autoclass:: sqlalchemy.orm.Session`` carries only a name; Sphinx imports
the object to get its signature, docstring and members.  This module finds the
same from the source text instead, in the spirit of sphinx-autoapi: the
documented code is parsed with :mod:`ast` and NEVER imported or executed
(importing a project to index its docs runs its code, needs its dependencies,
and is slow).

Where the source is (:func:`source_tree`, for a page and the top-level package
of a name, first match wins):

1. walking up from the page, at most :data:`WALK_UP` folders, any folder
   ``d`` holding ``d/<pkg>/__init__.py``, ``d/lib/<pkg>/`` or ``d/src/<pkg>/``
   (an sdist keeps docs in ``doc/build`` and code in ``lib/``; Loom's corpus
   cache keeps them as ``docs/`` and ``src/``);
2. the installed package, located by ``importlib.util.find_spec`` on the
   top-level name only (which reads the import path, running no package code)
   and then by file lookups.  The installed version may differ from the docs'
   (an entry may then be missing or show the newer signature).

How a name resolves (:meth:`SourceTree.resolve`): the longest dotted prefix
that is a module file, then each remaining part is looked up in the module's
top level (also inside ``if``/``try`` blocks), following ``from .x import
Name [as Other]`` re-exports and ``from .x import *`` up to :data:`MAX_HOPS`
modules deep, then in class bodies and, for a name a class does not define,
in its statically resolvable base classes.

Members (``:members:``) are the public names with a docstring a module or
class defines, in source order (Sphinx's ``autodoc_member_order = "bysource"``),
or those listed in ``:members: a, b`` or the module's ``__all__``, documented
or not; ``:inherited-members:`` adds those of the bases that resolve
statically (breadth first, not C3).  A class's docstring is followed by its
``__init__``'s (``autoclass_content = "both"``), its signature is its
``__init__``'s.  Signatures drop annotations and ``self``/``cls``.

Limits: what only exists at run time is not seen (attributes set in
``__init__``, generated methods, docstrings assigned to ``__doc__``, C
extensions, a signature a class inherits); ``#:`` comment docstrings are not
read; ``:undoc-members:``, ``:private-members:`` and ``:special-members:`` are
ignored; overload stubs are skipped for the implementation.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loom.python_ast import parse as parse_python

WALK_UP = 5
MAX_HOPS = 8

MAX_BASES = 64


@dataclass(frozen=True)
class ApiObject:
    """A documented object as the source defines it.

    ``kind`` is Sphinx's object type (``module``, ``class``, ``function``,
    ``method``, ``classmethod``, ``staticmethod``, ``property``,
    ``attribute``, ``data``); ``signature`` is ``"(instance, *, load=True)"``
    without ``self``/``cls`` and annotations, or ``""``; ``docstring`` is
    cleaned reST (a class's is followed by its ``__init__``'s).
    """

    name: str
    kind: str
    node: ast.AST
    module: str
    attribute_doc: str = ""  # the string literal after an assignment

    @property
    def signature(self) -> str:
        if isinstance(self.node, ast.ClassDef):
            init = _init(self.node)
            return _signature(init, drop_first=True) if init else ""
        if isinstance(self.node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and self.kind != "property":
            return _signature(self.node, self.kind not in ("function", "staticmethod"))
        return ""

    @property
    def docstring(self) -> str:
        if isinstance(self.node, ast.ClassDef):  # autoclass_content = "both"
            init = _init(self.node)
            docs = (ast.get_docstring(self.node), init and ast.get_docstring(init))
            return "\n\n".join(d for d in docs if d)
        if isinstance(self.node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            return ast.get_docstring(self.node) or ""
        return self.attribute_doc

    def members(self, tree: SourceTree, only: tuple[str, ...] = (),
                inherited: bool = False) -> list[ApiObject]:
        """Public documented members in source order (with ``inherited``, then those
        of the statically resolvable bases, nearest first); with ``only``, those
        names (documented or not).  Empty for what is neither a class nor a module."""
        if not isinstance(self.node, (ast.Module, ast.ClassDef)):
            return []
        if isinstance(self.node, ast.Module):
            own = {o.name: o for o in _defined(self.node.body, "", self.module)}
            only = only or _dunder_all(self.node)
        else:
            own = {}
            for cls in (tree.mro(self) if inherited or only else [self]):
                for o in _defined(_body(cls.node), "class", cls.module):
                    own.setdefault(o.name, o)
        if only:
            found = (own.get(n) or tree.resolve(f"{self._path()}.{n}") for n in only)
            return [o for o in found if o is not None]
        return [o for o in own.values() if not o.name.startswith("_") and o.docstring]

    def _path(self) -> str:
        return self.module if self.kind == "module" else f"{self.module}.{self.name}"


class SourceTree:
    """Dotted module names to parsed ``.py`` files under ``roots`` (tried in order)."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots

    def module_file(self, module: str) -> Path | None:
        parts = module.split(".")
        for root in self.roots:
            for f in (root.joinpath(*parts).with_suffix(".py"),
                      root.joinpath(*parts, "__init__.py")):
                if f.is_file():
                    return f
        return None

    def module(self, module: str) -> ast.Module | None:
        f = self.module_file(module)
        return _parse(str(f), f.stat().st_mtime_ns) if f else None

    def resolve(self, dotted: str) -> ApiObject | None:
        """The object ``dotted`` names (``sqlalchemy.orm.Session.merge``), or None."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            mod = ".".join(parts[:i])
            tree = self.module(mod)
            if tree is None:
                continue
            if i == len(parts):
                return self._submodule(mod)
            found = self._in_module(mod, tree, parts[i], MAX_HOPS)
            for name in parts[i + 1:]:
                found = found and (self._in_class(found, name) if isinstance(found.node, ast.ClassDef)
                                  else self._attribute(found, name))
            return found
        return None

    def _submodule(self, module: str) -> ApiObject | None:
        tree = self.module(module)
        if tree is None:
            return None
        return ApiObject(module.rpartition(".")[2], "module", tree, module)

    def _in_module(self, mod: str, tree: ast.Module, name: str, hops: int) -> ApiObject | None:
        if hops <= 0:
            return None
        for obj in _defined(tree.body, "", mod):
            if obj.name == name:
                return obj
        stars: list[str] = []
        for stmt in _statements(tree.body):
            if not isinstance(stmt, ast.ImportFrom):
                continue
            source = _absolute(mod, stmt, self.module_file(mod))
            for alias in stmt.names:
                if alias.name == "*":
                    stars.append(source)
                elif (alias.asname or alias.name) == name:
                    target = self.module(source)
                    found = target and self._in_module(source, target, alias.name, hops - 1)
                    return found or self._submodule(f"{source}.{alias.name}")
        for source in stars:
            target = self.module(source)
            found = target and self._in_module(source, target, name, hops - 1)
            if found:
                return found
        return None

    def _in_class(self, cls: ApiObject, name: str) -> ApiObject | None:
        """``name`` as ``cls`` or, first found, one of its bases defines it."""
        for c in self.mro(cls):
            for obj in _defined(_body(c.node), "class", c.module):
                if obj.name == name:
                    return obj
        return None

    def mro(self, cls: ApiObject) -> list[ApiObject]:
        """``cls`` and its bases that resolve statically, breadth first (not C3;
        at most :data:`MAX_BASES`)."""
        order: list[ApiObject] = []
        queue, seen = [cls], set()
        while queue and len(order) < MAX_BASES:
            c = queue.pop(0)
            if not isinstance(c.node, ast.ClassDef) or id(c.node) in seen:
                continue
            seen.add(id(c.node))
            order.append(c)
            tree = self.module(c.module)
            if tree is None:
                continue
            for base in c.node.bases:
                expr = base.value if isinstance(base, ast.Subscript) else base  # Generic[T]
                head, *rest = ast.unparse(expr).split(".")
                found = self._in_module(c.module, tree, head, MAX_HOPS)
                for part in rest:
                    found = found and self._attribute(found, part)
                if found:
                    queue.append(found)
        return order

    def _attribute(self, obj: ApiObject, name: str) -> ApiObject | None:
        """``name`` in a module (following re-exports) or a class body (own only)."""
        if isinstance(obj.node, ast.Module):
            return self._in_module(obj.module, obj.node, name, MAX_HOPS)
        if isinstance(obj.node, ast.ClassDef):
            return next((o for o in _defined(obj.node.body, "class", obj.module)
                         if o.name == name), None)
        return None


@functools.lru_cache(maxsize=32)
def _parse(path: str, mtime_ns: int) -> ast.Module | None:
    """A parsed source file, cached per process keyed by its modification time; 32
    modules (SQLAlchemy's docs touch 154, whose trees hold about 170 MB) re-parse
    in about 7 ms each."""
    try:
        return parse_python(Path(path).read_text(encoding="utf-8"), filename=path)
    except (SyntaxError, ValueError, OSError, UnicodeDecodeError):
        return None


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a module or class body, also those in ``if``/``try`` blocks."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _statements(stmt.body)
            yield from _statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse):
                yield from _statements(block)
        else:
            yield stmt


def _absolute(mod: str, stmt: ast.ImportFrom, file: Path | None) -> str:
    """The absolute module of ``from <stmt.module> import ...`` inside ``mod``."""
    if not stmt.level:
        return stmt.module or ""
    package = mod if file is not None and file.name == "__init__.py" else mod.rpartition(".")[0]
    base = package.rsplit(".", stmt.level - 1)[0] if stmt.level > 1 else package
    return f"{base}.{stmt.module}" if stmt.module else base


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]


def _function_kind(node: ast.FunctionDef | ast.AsyncFunctionDef, scope: str) -> str | None:
    """Sphinx's object type of a def, or None for an overload stub or a setter."""
    names = _decorators(node)
    if any(n.rsplit(".", 1)[-1] == "overload" or n.endswith((".setter", ".deleter"))
           for n in names):
        return None
    if not scope:
        return "function"
    last = [n.rsplit(".", 1)[-1] for n in names]
    if "classmethod" in last:
        return "classmethod"
    if "staticmethod" in last:
        return "staticmethod"
    return "property" if any(n.endswith("property") for n in last) else "method"


def _body(node: ast.AST) -> list[ast.stmt]:
    """The statements of a module or class node (none for anything else)."""
    return node.body if isinstance(node, (ast.Module, ast.ClassDef)) else []


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> str:
    """``"(a, *, b=1)"``: the parameters as written, without annotations."""
    def bare(a: ast.arg) -> ast.arg:
        return ast.arg(arg=a.arg)

    a = node.args
    positional = [*map(bare, a.posonlyargs), *map(bare, a.args)]
    if drop_first and positional:
        positional.pop(0)
    n_posonly = max(len(a.posonlyargs) - drop_first, 0)
    args = ast.arguments(posonlyargs=positional[:n_posonly], args=positional[n_posonly:],
                         vararg=a.vararg and bare(a.vararg), kwonlyargs=[*map(bare, a.kwonlyargs)],
                         kw_defaults=a.kw_defaults, kwarg=a.kwarg and bare(a.kwarg), defaults=a.defaults)
    return f"({ast.unparse(args)})"


def _init(node: ast.ClassDef) -> ast.FunctionDef | None:
    return next((s for s in _statements(node.body) if isinstance(s, ast.FunctionDef)
                 and s.name == "__init__" and _function_kind(s, "class")), None)


def _defined(body: list[ast.stmt], scope: str, module: str) -> Iterator[ApiObject]:
    """What a module (``scope=""``) or class body defines, first definition of a name only."""
    seen: set[str] = set()
    stmts = list(_statements(body))
    for i, stmt in enumerate(stmts):
        found: list[tuple[str, str]] = []
        doc = ""
        if isinstance(stmt, ast.ClassDef):
            found = [(stmt.name, "class")]
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = _function_kind(stmt, scope)
            found = [(stmt.name, kind)] if kind else []
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            found = [(t.id, "attribute" if scope else "data") for t in targets
                     if isinstance(t, ast.Name)]
            nxt = stmts[i + 1] if i + 1 < len(stmts) else None
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                    and isinstance(nxt.value.value, str):
                doc = inspect.cleandoc(nxt.value.value)
        for name, kind in found:
            if name not in seen:
                seen.add(name)
                yield ApiObject(name, kind, stmt, module, doc)


def _dunder_all(tree: ast.Module) -> tuple[str, ...]:
    for stmt in _statements(tree.body):
        if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            try:
                names = ast.literal_eval(stmt.value)
            except ValueError:
                return ()
            return tuple(n for n in names if isinstance(n, str))
    return ()


def _roots_near(start: Path, package: str) -> list[Path]:
    for folder in [start, *start.parents][:WALK_UP + 1]:
        for root in (folder, folder / "lib", folder / "src"):
            if (root / package / "__init__.py").is_file() or (root / f"{package}.py").is_file():
                return [root]
    return []


def _installed_root(package: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(package)  # top-level name: runs no package code
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).parent for p in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin and spec.origin.endswith(".py") else []


@functools.lru_cache(maxsize=256)
def source_tree(page: str | None, package: str) -> SourceTree | None:
    """The source of top-level ``package`` for the page at path ``page`` (see the
    module docstring for the order); None when there is none."""
    folder = Path(page).resolve().parent if page and Path(page).is_file() else None
    roots = (_roots_near(folder, package) if folder else []) or _installed_root(package)
    return SourceTree(roots) if roots else None


def resolve(page: str | None, dotted: str) -> tuple[SourceTree, ApiObject] | None:
    """The source tree and object for autodoc name ``dotted`` on page ``page``, or None."""
    if not dotted or not dotted.split(".")[0].isidentifier():
        return None
    tree = source_tree(page, dotted.split(".")[0])
    obj = tree.resolve(dotted) if tree else None
    return (tree, obj) if tree and obj else None
