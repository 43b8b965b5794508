"""Static autodoc: entries filled from the parsed source, never imported (loom.retrieval.loaders.autodoc)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loom.retrieval.loaders import load_file, load_rst, sphinx_python
from loom.retrieval.loaders.autodoc import resolve
from loom.retrieval.types import Document

DATA = Path(__file__).parent / "data"
SESSION_API = DATA / "sqlalchemy-2.0.36_orm_session_api.rst"
LEAKS = ("Unknown", "ERROR/", "WARNING/", "System Message", "interpreted text role",
         "directive type", "|version|", "Undefined substitution")


def _by_object(doc: Document) -> dict[str, str]:
    return {s.metadata["object"]: s.text for s in doc.sections if "object" in s.metadata}


def _with_body(doc: Document) -> int:
    return sum(1 for text in _by_object(doc).values() if len(text.split("\n\n", 1)) == 2)


def test_real_session_api_merge_has_its_signature_and_docstring_from_the_source() -> None:
    # resolved against the installed SQLAlchemy (no source beside tests/retrieval/data)
    entries = _by_object(load_file(SESSION_API))
    merge = entries["sqlalchemy.orm.Session.merge"]
    assert merge.startswith("sqlalchemy.orm.Session.merge(instance, *, load=True, options=None)"
                            "\n\nCopy the state of a given instance into a corresponding instance")
    assert "examines the primary key attributes" in merge and ":meth:" not in merge
    assert entries["sqlalchemy.orm.Session.add"].startswith(
        "sqlalchemy.orm.Session.add(instance, *, _warn=True)\n\nPlace an object into this")
    assert entries["sqlalchemy.orm.Session"].startswith("sqlalchemy.orm.Session(bind=None, *,")
    assert entries["sqlalchemy.orm.close_all_sessions"].startswith(
        "sqlalchemy.orm.close_all_sessions()\n\nClose all sessions in memory.")


def test_real_session_api_bodies_go_up_versus_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = load_file(SESSION_API)
    monkeypatch.setattr(sphinx_python, "resolve", lambda page, name: None)
    names_only = load_file(SESSION_API)
    assert _with_body(names_only) == 1  # the one native ``.. function:: instance_state``
    assert _with_body(resolved) > 80
    assert [s.metadata for s in names_only.sections if s.metadata] == [
        s.metadata for s in resolved.sections
        if s.metadata and s.metadata["object"] in _by_object(names_only)]


def test_real_session_api_has_no_parser_message_in_any_section() -> None:
    for s in load_file(SESSION_API).sections:
        assert not any(leak in s.text or leak in s.heading for leak in LEAKS), s.text


def test_unresolvable_autodoc_names_keep_a_name_only_section() -> None:
    doc = load_rst(".. currentmodule:: sqlalchemy.orm\n\n"
                   ".. autoclass:: NoSuchThing\n   :members:\n\n"
                   ".. autofunction:: nosuchpkg_loom.f\n\n"
                   ".. autoclass:: 3bad.Name\n", str(SESSION_API))
    assert [(s.metadata["object"], s.text) for s in doc.sections] == [
        ("sqlalchemy.orm.NoSuchThing", "sqlalchemy.orm.NoSuchThing"),
        ("nosuchpkg_loom.f", "nosuchpkg_loom.f"), ("3bad.Name", "3bad.Name")]


CORE = '''\
"""Core of loomtestpkg."""

from .base import Base

LIMIT = 3
"""How many things at most."""


class Thing(Base):
    """A thing; see :meth:`.Thing.grow`.

    .. versionadded:: 1.2
    """

    limit: int = 3
    """The size limit."""

    bare = 1

    def __init__(self, size: int, *, color: str = "red") -> None:
        """Make a thing of ``size``."""

    def grow(self, by: int = 1) -> "Thing":
        """Grow by ``by``; returns :class:`.Thing`."""

    @property
    def area(self) -> int:
        """The area covered."""

    @area.setter
    def area(self, value: int) -> None:
        """Not documented separately."""

    @classmethod
    def empty(cls) -> "Thing":
        """An empty thing."""

    def _hidden(self) -> None:
        """Private."""

    def undocumented(self) -> None:
        pass


def make(n, *args, **kw):
    """Make ``n`` things."""


raise RuntimeError("loomtestpkg.core must never be imported by the loader")
'''

API = """\
API
===

.. currentmodule:: loomtestpkg

.. autoclass:: Thing
   :members:

   Written in the page.

   .. method:: grow(by=1)

      Documented in the page instead.

.. autoclass:: Thing
   :members: undocumented, area
   :noindex:

.. autofunction:: loomtestpkg.make

.. automodule:: loomtestpkg.core
   :members:
   :exclude-members: Thing
"""


@pytest.fixture
def sdist(tmp_path: Path) -> Path:
    pkg = tmp_path / "sdist" / "lib" / "loomtestpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from .core import Thing as Thing\nfrom .core import make\n"
        "raise RuntimeError('never imported')\n")
    (pkg / "base.py").write_text("class Base:\n    def size(self):\n        '''Base size.'''\n")
    (pkg / "core.py").write_text(CORE)
    page = tmp_path / "sdist" / "doc" / "build" / "api.rst"
    page.parent.mkdir(parents=True)
    page.write_text(API)
    return page


def test_synthetic_sdist_resolves_by_walking_up_without_importing(sdist: Path) -> None:
    doc = load_file(sdist)
    assert "loomtestpkg" not in sys.modules and "loomtestpkg.core" not in sys.modules
    assert [(s.metadata["object"], s.metadata["objtype"], s.text) for s in doc.sections] == [
        ("loomtestpkg.Thing", "class",
         "loomtestpkg.Thing(size, *, color='red')\n\nA thing; see Thing.grow().\n\n"
         "Added in version 1.2.\n\nMake a thing of size.\n\nWritten in the page."),
        ("loomtestpkg.Thing.grow", "method",
         "loomtestpkg.Thing.grow(by=1)\n\nDocumented in the page instead."),
        ("loomtestpkg.Thing.limit", "attribute", "loomtestpkg.Thing.limit\n\nThe size limit."),
        ("loomtestpkg.Thing.area", "property", "loomtestpkg.Thing.area\n\nThe area covered."),
        ("loomtestpkg.Thing.empty", "classmethod",
         "loomtestpkg.Thing.empty()\n\nAn empty thing."),
        ("loomtestpkg.Thing", "class",
         "loomtestpkg.Thing(size, *, color='red')\n\nA thing; see Thing.grow().\n\n"
         "Added in version 1.2.\n\nMake a thing of size."),
        ("loomtestpkg.Thing.undocumented", "method", "loomtestpkg.Thing.undocumented()"),
        ("loomtestpkg.Thing.area", "property", "loomtestpkg.Thing.area\n\nThe area covered."),
        ("loomtestpkg.make", "function",
         "loomtestpkg.make(n, *args, **kw)\n\nMake n things."),
        ("loomtestpkg.core", "module", "loomtestpkg.core\n\nCore of loomtestpkg."),
        ("loomtestpkg.core.LIMIT", "data", "loomtestpkg.core.LIMIT\n\nHow many things at most."),
        ("loomtestpkg.core.make", "function",
         "loomtestpkg.core.make(n, *args, **kw)\n\nMake n things."),
    ]
    assert {s.heading for s in doc.sections} == {"API"}


def test_inherited_member_resolves_through_a_statically_named_base(sdist: Path) -> None:
    found = resolve(str(sdist), "loomtestpkg.Thing.size")
    assert found is not None
    assert (found[1].kind, found[1].signature, found[1].docstring) == ("method", "()", "Base size.")


def test_source_beside_the_page_wins_over_the_installed_package(tmp_path: Path) -> None:
    pkg = tmp_path / "src" / "sqlalchemy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def create_engine(url):\n    '''Local copy.'''\n")
    page = tmp_path / "docs" / "core" / "engines.rst"
    page.parent.mkdir(parents=True)
    page.write_text(".. autofunction:: sqlalchemy.create_engine\n")
    (section,) = load_file(page).sections
    assert section.text == "sqlalchemy.create_engine(url)\n\nLocal copy."


def test_names_outside_any_source_resolve_to_nothing() -> None:
    assert resolve(None, "loom_no_such_package.x") is None
    assert resolve(None, "") is None and resolve(None, "3bad.Name") is None


def test_inherited_members_option_adds_the_documented_members_of_resolvable_bases(
        sdist: Path) -> None:
    page = sdist.with_name("inherited.rst")
    page.write_text(".. autoclass:: loomtestpkg.Thing\n   :members: area\n   :inherited-members:\n"
                    "\n.. autoclass:: loomtestpkg.core.Thing\n   :members:\n"
                    "   :inherited-members:\n   :exclude-members: grow, limit, area, empty\n")
    assert [s.metadata["object"] for s in load_file(page).sections] == [
        "loomtestpkg.Thing", "loomtestpkg.Thing.area",
        "loomtestpkg.core.Thing", "loomtestpkg.core.Thing.size"]


def test_real_session_inherited_members_come_from_its_mixin_base() -> None:
    entries = _by_object(load_file(SESSION_API))
    assert entries["sqlalchemy.orm.Session.identity_key"].startswith(
        "sqlalchemy.orm.Session.identity_key(class_=None, ident=None, *, instance=None,")
    assert "sqlalchemy.orm.SessionTransaction.identity_key" not in entries  # no option there
