"""The built-in demo corpus: the running Python's standard-library documentation.

Two parts, both present on every CPython install:

* ``stdlib:topics`` — the language-reference topics of ``pydoc_data.topics``
  (what ``help("assert")`` shows): one document per topic, split at its
  underlined headings.
* ``stdlib:modules`` — docstrings of public stdlib modules read with
  :mod:`inspect` (what ``pydoc`` renders): one document per module, one section
  per public function, class and method, headed by its qualified name
  (``os.path.join``, ``collections.OrderedDict.move_to_end``) followed by its
  signature, so identifier queries have something exact to match.

``stdlib:`` (or ``stdlib:all``) is both; ``stdlib:module/<name>`` one module.
Modules with import side effects (``antigravity``, ``this``, GUI toolkits,
``test``) are never imported.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

from loom.retrieval.types import Document, Section

logger = logging.getLogger(__name__)

_SKIP = {
    "antigravity", "this", "idlelib", "turtle", "turtledemo", "tkinter", "lib2to3",
    "ensurepip", "pydoc_data", "test", "msilib", "winreg", "winsound", "msvcrt", "nt",
    "xxsubtype", "xxlimited", "sre_compile", "sre_constants", "sre_parse", "venv",
    "__future__", "__main__", "_tkinter", "site",
}
_SUBMODULES = (
    "os.path", "collections.abc", "concurrent.futures", "urllib.parse",
    "urllib.request", "xml.etree.ElementTree", "email.message", "logging.handlers",
    "logging.config", "importlib.metadata", "importlib.resources", "unittest.mock",
    "http.client", "http.server", "json.decoder", "multiprocessing.pool",
    "asyncio.subprocess", "sqlite3.dbapi2", "email.utils", "xml.dom.minidom",
)
_UNDERLINE = re.compile(r"^([*=\-~^\"'+#])\1{2,}\s*$")
_LEVELS = {"*": 1, "=": 2, "-": 3, "~": 4, "^": 5}


def topic_document(name: str, text: str) -> Document:
    """One ``pydoc_data.topics`` entry as a document split at underlined headings."""
    lines = text.splitlines()
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    buf: list[str] = []
    title = ""

    def flush() -> None:
        body = "\n".join(buf).strip()
        if body:
            sections.append(Section(" > ".join(h for _, h in stack[1:]), body))
        buf.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        m = _UNDERLINE.match(nxt)
        if line.strip() and m and len(nxt.rstrip()) >= len(line.rstrip()) - 1:
            flush()
            level = _LEVELS.get(m.group(1), 6)
            title = title or line.strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, line.strip()))
            i += 2
            continue
        buf.append(line)
        i += 1
    flush()
    return Document(f"stdlib:topic/{name}", title or name, tuple(sections),
                    source="pydoc_data.topics", metadata={"kind": "topic", "topic": name})


def iter_topics() -> Iterator[Document]:
    """Every language-reference topic of ``pydoc_data.topics``, sorted by key."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield topic_document(name, topics[name])


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _signature(obj: object) -> str:
    """``(a, *p)``; default reprs lose their memory address (``<object object>``), which
    changes every process and would re-embed the chunk at every ingest."""
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"


def _member_section(qualname: str, obj: object, module: str) -> Section | None:
    """The entry of one function/class/method; ``metadata.object`` names it (``loom.retrieval.objects``)."""
    doc = inspect.getdoc(obj)
    if not doc:
        return None
    sig = _signature(obj) if callable(obj) else ""
    kind = "class" if inspect.isclass(obj) else "method" if qualname.count(".") > module.count(".") + 1 \
        else "function"
    return Section(qualname, f"{qualname}{sig}\n\n{doc}",
                   {"object": qualname, "objtype": kind, "module": module})


def _public_names(mod: ModuleType) -> list[str]:
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mod).items()
                 if getattr(v, "__module__", None) == mod.__name__]
    return sorted(n for n in names if isinstance(n, str) and not n.startswith("_"))


def module_document(mod: ModuleType, name: str | None = None) -> Document:
    """A module's docstring plus one section per public function/class/method.

    ``name`` is the import name when it differs from ``__name__``
    (``os.path`` is ``posixpath``).
    """
    name = name or mod.__name__
    sections: list[Section] = []
    if doc := inspect.getdoc(mod):
        sections.append(Section(name, doc))
    for attr in _public_names(mod):
        obj = getattr(mod, attr, None)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if sec := _member_section(f"{name}.{attr}", obj, name):
            sections.append(sec)
        if inspect.isclass(obj):
            for meth, val in sorted(vars(obj).items()):
                if meth.startswith("_") or not inspect.isroutine(val):
                    continue
                if sec := _member_section(f"{name}.{attr}.{meth}", getattr(obj, meth, val), name):
                    sections.append(sec)
    return Document(f"stdlib:module/{name}", name, tuple(sections), source=f"module {name}",
                    metadata={"kind": "module", "module": name})


def stdlib_module_names() -> list[str]:
    """Public stdlib modules (plus a few well-known submodules), sorted."""
    top = {n for n in sys.stdlib_module_names if not n.startswith("_") and n not in _SKIP}
    return sorted(top | set(_SUBMODULES))


def iter_modules(names: list[str] | None = None) -> Iterator[Document]:
    """Module documents; modules that fail to import are skipped with a debug log."""
    for name in names or stdlib_module_names():
        if name.split(".")[0] in _SKIP:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - platform-specific modules
            logger.debug("stdlib module %s not importable: %s", name, exc)
            continue
        doc = module_document(mod, name)
        if doc.sections:
            yield doc


def load_stdlib(part: str = "") -> Iterator[Document]:
    """Documents of ``stdlib:<part>``: ``""``/``all``, ``topics``, ``modules``,
    ``topic/<key>`` or ``module/<name>``.

    Raises:
        ValueError: unknown part, topic or module.
    """
    part = part.strip("/")
    if part in ("", "all"):
        yield from iter_topics()
        yield from iter_modules()
    elif part == "topics":
        yield from iter_topics()
    elif part == "modules":
        yield from iter_modules()
    elif part.startswith("topic/"):
        from pydoc_data.topics import topics

        key = part[len("topic/"):]
        if key not in topics:
            raise ValueError(f"path: unknown stdlib topic {key!r}")
        yield topic_document(key, topics[key])
    elif part.startswith("module/"):
        docs = list(iter_modules([part[len("module/"):]]))
        if not docs:
            raise ValueError(f"path: stdlib module {part[7:]!r} not importable or undocumented")
        yield from docs
    else:
        raise ValueError(
            f"path: unknown stdlib part {part!r} (use stdlib:, stdlib:topics, "
            "stdlib:modules, stdlib:topic/<key> or stdlib:module/<name>)")
