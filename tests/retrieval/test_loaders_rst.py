"""reST loader: docutils with Sphinx's directives and roles (loom.retrieval.loaders.rst, .sphinx)."""

from __future__ import annotations

import re
from pathlib import Path

from docutils.parsers.rst import directives, roles

from loom.retrieval.loaders import load_file, load_rst
from loom.retrieval.types import Document

DATA = Path(__file__).parent / "data"
LEAKS = ("Unknown", "ERROR/", "WARNING/", "System Message", "interpreted text role",
         "directive type", "|version|", "Undefined substitution")

# Written in the style of CPython's Doc/library/random.rst (not a copy of it).
RANDOM_STYLE = """\
:mod:`!random` --- Generate pseudo-random numbers
=================================================

.. module:: random
   :synopsis: Generate pseudo-random numbers with various common distributions.

**Source code:** :source:`Lib/random.py`

This module implements pseudo-random number generators, release |version|.

Functions for sequences
-----------------------

.. function:: choice(seq)

   Return a random element from the non-empty sequence *seq*.  If *seq* is
   empty, raises :exc:`IndexError`.

.. function:: choices(population, weights=None, *, cum_weights=None, k=1)

   Return a *k* sized list of elements chosen from the *population* with
   replacement.  See :func:`~random.choice` and :ref:`the recipes <recipes>`.

   .. versionadded:: 3.6

   .. versionchanged:: 3.9
      Added the *weights* parameter.

   .. note:: The *weights* are floats.

.. data:: SEED_BITS

   Bits of state taken from :func:`os.urandom`.

Alternative generators
----------------------

.. class:: Random([seed])

   Class that implements the default generator used by the :mod:`random` module.

   .. method:: Random.seed(a=None, version=2)

      Initialise the generator.

      .. deprecated:: 3.11 Seeding with a set is removed.

   .. method:: getstate()

      Return an object capturing the current state.

   .. attribute:: VERSION
      :type: int

      The state format version.

.. exception:: RandomError

   Raised on a bad state.

.. decorator:: reseeding(n)

   Reseed every *n* calls.

.. py:function:: gauss(mu=0.0, sigma=1.0)

   Normal distribution; see :pep:`506` and :rfc:`4086#section-6`.

.. currentmodule:: secrets

.. function:: token_bytes([nbytes=None])
   :module: secrets

   Return a random byte string.

.. seealso::

   :class:`.SystemRandom`, the :term:`hashable` rules.
"""


def _doc() -> Document:
    return load_rst(RANDOM_STYLE, "random.rst")


def _entries(doc: Document) -> list[tuple[str, str, str]]:
    return [(s.metadata["object"], s.metadata["objtype"], s.metadata["module"])
            for s in doc.sections if "object" in s.metadata]


def test_each_object_description_is_a_section_with_qualified_name_and_metadata() -> None:
    doc = _doc()
    assert doc.title == "random — Generate pseudo-random numbers"
    assert _entries(doc) == [
        ("random.choice", "function", "random"),
        ("random.choices", "function", "random"),
        ("random.SEED_BITS", "data", "random"),
        ("random.Random", "class", "random"),
        ("random.Random.seed", "method", "random"),
        ("random.Random.getstate", "method", "random"),
        ("random.Random.VERSION", "attribute", "random"),
        ("random.RandomError", "exception", "random"),
        ("random.reseeding", "decorator", "random"),
        ("random.gauss", "function", "random"),
        ("secrets.token_bytes", "function", "secrets"),
    ]


def test_entry_text_starts_with_qualified_signature_under_enclosing_heading() -> None:
    by_object = {s.metadata.get("object"): s for s in _doc().sections}
    choices = by_object["random.choices"]
    assert choices.heading == "random — Generate pseudo-random numbers > Functions for sequences"
    assert choices.text == (
        "random.choices(population, weights=None, *, cum_weights=None, k=1)\n\n"
        "Return a k sized list of elements chosen from the population with\n"
        "replacement.  See choice() and the recipes.\n\n"
        "Added in version 3.6.\n\n"
        "Changed in version 3.9: Added the weights parameter.\n\n"
        "Note: The weights are floats.")
    seed = by_object["random.Random.seed"]
    assert seed.heading == "random — Generate pseudo-random numbers > Alternative generators"
    assert seed.text == ("random.Random.seed(a=None, version=2)\n\nInitialise the generator.\n\n"
                         "Deprecated since version 3.11: Seeding with a set is removed.")
    assert by_object["random.Random"].text == (
        "random.Random([seed])\n\n"
        "Class that implements the default generator used by the random module.")
    assert by_object["random.gauss"].text.endswith("see PEP 506 and RFC 4086.")
    assert by_object["secrets.token_bytes"].text.startswith("secrets.token_bytes([nbytes=None])")


def test_text_outside_entries_stays_in_heading_sections_in_document_order() -> None:
    sections = _doc().sections
    assert sections[0].metadata == {}
    assert sections[0].text == ("Source code: Lib/random.py\n\n"
                                "This module implements pseudo-random number generators, release .")
    assert sections[-1].metadata == {}
    assert sections[-1].text == "See also: SystemRandom, the hashable rules."
    assert [s.metadata.get("object", s.heading) for s in sections].index("random.choice") == 1


def test_roles_render_as_sphinx_shows_them() -> None:
    doc = load_rst(
        "Roles\n=====\n\n:func:`~random.choices`, :ref:`the guide <label>`, :class:`.Session`, "
        ":meth:`Session.merge`, :paramref:`.Session.merge.load`, :mod:`!random`, "
        ":py:attr:`~.Mapper.attrs`, :doc:`/orm/events`, :term:`hashable`, :kbd:`C-x`, "
        ":abbr:`LIFO (last-in, first-out)`, ``code`` and :math:`a^2`.\n", "r.rst")
    assert doc.sections[0].text == (
        "choices(), the guide, Session, Session.merge(), Session.merge.load, random, attrs, "
        "/orm/events, hashable, C-x, LIFO (last-in, first-out), code and a^2.")


def test_unknown_directives_and_roles_keep_their_content() -> None:
    doc = load_rst(
        "Changes\n=======\n\n"
        ".. changelog::\n    :version: 1.2.0b3\n    :released: December 27, 2017\n"
        "    :released: October 13, 2017\n\n"
        "    .. change::\n        :tags: bug, orm\n        :tickets: 4109\n\n"
        "        Fixed :madeup:`the widget <w>` and :ticket:`4100`.\n\n"
        ".. c:function:: int frob(void)\n\n   Frobs.\n\n"
        ".. sidebar-note:: Heads up\n\n   Sidebar body.\n", "c.rst")
    (section,) = doc.sections
    assert section.text == (
        "version: 1.2.0b3\nreleased: December 27, 2017; October 13, 2017\n\n"
        "tags: bug, orm\ntickets: 4109\n\nFixed the widget and 4100.\n\n"
        "int frob(void)\n\nFrobs.\n\nHeads up\n\nSidebar body.")


def test_no_parser_message_reaches_section_text() -> None:
    source = (RANDOM_STYLE + "\nBroken\n------\n\n"
              "Text with *unclosed emphasis, an |undefined| substitution, a missing_ target,\n"
              ":nosuchrole:`kept words` and ``literal``.\n\n"
              ".. code-block:: python\n   :linenos:\n   :bogus-option: 3\n\n   x = 1\n\n"
              ".. note::\n   :bad-option: here\n\n   Note body.\n\n"
              ".. image:: missing.png\n\n.. [#] \n\nSub\n~~~\n\nBody.\n\nSub2\n****\n\nLevels.\n")
    doc = load_rst(source, "broken.rst")
    for s in doc.sections:
        for leak in LEAKS:
            assert leak not in s.text and leak not in s.heading, (leak, s.text)
    broken = "\n\n".join(s.text for s in doc.sections if "Broken" in s.heading)
    assert "kept words" in broken and "x = 1" in broken and "a missing target" in broken
    assert "Note: Note body." in broken  # docutils' own directive, an option it does not know


def test_comments_toctree_index_and_includes_produce_no_text() -> None:
    doc = load_rst(
        "Title\n=====\n\n.. a comment that must not be indexed\n\n"
        ".. toctree::\n   :maxdepth: 2\n\n   hidden/page\n\n"
        ".. index:: single: hidden entry\n\n.. include:: ../hidden.rst\n\n"
        ".. literalinclude:: hidden.py\n\n.. contents::\n   :local:\n\n"
        ".. highlight:: python\n\nVisible text.\n\nSub\n---\n\nMore.\n", "t.rst")
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("Title", "Visible text."), ("Title > Sub", "More.")]


def test_code_block_with_sphinx_options_is_kept_verbatim() -> None:
    doc = load_rst("Code\n====\n\n.. code-block:: python\n   :linenos:\n   :emphasize-lines: 2\n\n"
                   "   def f(x):\n       return x * 2\n\n"
                   ".. sourcecode::\n\n   plain = 1\n\n   more = 2\n", "code.rst")
    assert doc.sections[0].text == "def f(x):\n    return x * 2\n\nplain = 1\n\nmore = 2"


def test_glossary_with_several_terms_per_entry_keeps_terms_and_definitions() -> None:
    doc = load_rst("Glossary\n========\n\n.. glossary::\n    :sorted:\n\n    1.x style\n    2.0 style\n"
                   "        Terms of the 2.0 transition.\n\n    sentinel\n        A column.\n", "g.rst")
    assert doc.sections[0].text == ("1.x style; 2.0 style\nTerms of the 2.0 transition.\n\n"
                                    "sentinel\nA column.")


def test_docutils_registries_are_left_as_they_were() -> None:
    before = (directives.directive, roles.role, dict(directives._directives), dict(roles._roles))
    load_rst(RANDOM_STYLE + "\n.. role:: custom\n\n:custom:`x`\n", "r.rst")
    assert (directives.directive, roles.role) == before[:2]
    assert dict(directives._directives) == before[2] and dict(roles._roles) == before[3]


_OBJECT_DIRECTIVE = re.compile(
    r"^\s*\.\.\s+(?:py:)?(auto(?:function|class|method|attribute|data|exception|module)|function"
    r"|class|method|attribute|data|exception)::\s*(\S+)", re.M)


def test_real_sqlalchemy_session_api_entries_match_sphinx_inventory_names() -> None:
    # Expected names are those of the objects.inv Sphinx 9.0.4 (autodoc) builds for this page.
    doc = load_file(DATA / "sqlalchemy-2.0.36_orm_session_api.rst")
    assert doc.title == "Session API"
    orm, attrs = "sqlalchemy.orm", "sqlalchemy.orm.attributes"
    expected = [
        *((f"{orm}.{n}", "class", orm) for n in (
            "sessionmaker", "ORMExecuteState", "Session", "SessionTransaction",
            "SessionTransactionOrigin")),
        *((f"{orm}.{n}", "function", orm) for n in (
            "close_all_sessions", "make_transient", "make_transient_to_detached",
            "object_session")),
        ("sqlalchemy.orm.util.was_deleted", "function", "sqlalchemy.orm.util"),
        ("sqlalchemy.orm.util.object_state", "function", "sqlalchemy.orm.util"),
        *((f"{attrs}.{n}", "function", attrs) for n in (
            "del_attribute", "get_attribute", "get_history", "init_collection", "flag_modified",
            "flag_dirty", "instance_state")),
        ("sqlalchemy.orm.instrumentation.is_instrumented", "function",
         "sqlalchemy.orm.instrumentation"),
        (f"{attrs}.set_attribute", "function", attrs),
        (f"{attrs}.set_committed_value", "function", attrs),
        (f"{attrs}.History", "class", attrs),
    ]
    # every entry the page names, in page order; autodoc adds only members of its classes
    got = _entries(doc)
    it = iter(got)
    assert all(e in it for e in expected)
    classes = tuple(name + "." for name, kind, _ in expected if kind == "class")
    extra = [e[0] for e in got if e not in expected]
    assert extra and all(name.startswith(classes) for name in extra), extra
    state = next(s for s in doc.sections if s.metadata.get("object") == f"{attrs}.instance_state")
    assert state.heading == "Session API > Attribute and State Management Utilities"
    assert state.text.startswith(f"{attrs}.instance_state\n\nReturn the InstanceState for a given")


def test_real_sqlalchemy_pages_have_a_section_for_every_object_directive() -> None:
    for name in ("sqlalchemy-2.0.36_orm_session_api.rst", "sqlalchemy-2.0.36_orm_mapping_api.rst"):
        source = (DATA / name).read_text()
        doc = load_file(DATA / name)
        objects = [s.metadata["object"] for s in doc.sections if "object" in s.metadata]
        wanted = _OBJECT_DIRECTIVE.findall(source)
        it = iter(objects)  # each directive's entry, in page order (autodoc members come in between)
        for _, target in wanted:
            assert any(obj == target or obj.endswith("." + target) for obj in it), target
        for s in doc.sections:
            assert not any(leak in s.text for leak in LEAKS), s.text


def test_real_sqlalchemy_attribute_nested_in_autoclass_keeps_its_body() -> None:
    doc = load_file(DATA / "sqlalchemy-2.0.36_orm_mapping_api.rst")
    cascading = next(s for s in doc.sections
                     if s.metadata.get("object") == "sqlalchemy.orm.declared_attr.cascading")
    assert cascading.metadata == {"object": "sqlalchemy.orm.declared_attr.cascading",
                                  "objtype": "attribute", "module": "sqlalchemy.orm"}
    assert cascading.text.startswith("sqlalchemy.orm.declared_attr.cascading\n\n"
                                     "Mark a declared_attr as cascading.")
    assert "Warning: The declared_attr.cascading modifier has several" in cascading.text
    assert "class HasIdMixin:\n    @declared_attr.cascading" in cascading.text
    assert "See also: declarative_inheritance" in cascading.text


def test_real_sqlalchemy_changelog_fragment_keeps_options_and_body() -> None:
    doc = load_file(DATA / "sqlalchemy-2.0.36_changelog_unreleased_13_7115.rst")
    (section,) = doc.sections
    assert section.text.startswith("tags: bug, mysql, mariadb\ntickets: 7115, 7136\n"
                                   "versions: 1.4.26\n\nFixes to accommodate for the MariaDB 10.6")
    assert section.text.endswith("Thanks to Georg Richter\nfor support.")
