"""Sphinx's general directives for docutils (see :mod:`loom.retrieval.loaders.sphinx`).

:class:`Base` is what every handler here builds on: it takes any argument,
options and content, and reads the options itself (:meth:`Base.head`), so an
option docutils does not know, or one given twice, never drops a directive.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList


class labelled(nodes.General, nodes.Element):
    """A block shown as ``"<label>: <body>"`` (version notes, ``seealso``)."""


class generic(nodes.General, nodes.Element):
    """An unknown directive: its argument and options as a paragraph, then its content."""


class _AnyOptions(dict[str, Callable[[str], object]]):
    """An option spec that also accepts names it does not declare (value kept as text)."""

    def __missing__(self, key: str) -> Callable[[str], object]:
        return directives.unchanged


@functools.cache
def lenient(cls: type[Directive]) -> type[Directive]:
    """A docutils directive that ignores options it does not know (Sphinx adds some,
    projects add more) instead of dropping its content with an error."""
    return type(cls.__name__, (cls,), {"option_spec": _AnyOptions(cls.option_spec or {})})


_OPTION = re.compile(r"^:((?:[^:\\]|\\.)+):(?:\s+(.*))?$")


class Base(Directive):
    """Takes any argument, options and content.  Options are read by :meth:`head`,
    not by docutils, which rejects a repeated or undeclared option and then drops
    the whole directive."""

    has_content = True
    required_arguments = 0
    optional_arguments = 1
    final_argument_whitespace = True
    option_spec = None

    def head(self) -> tuple[str, dict[str, str], list[str]]:
        """(argument, options, content lines that docutils took for the argument).

        docutils reads the lines up to the first blank one as the argument
        block; without an argument on the directive line they are content.
        """
        inline = bool(self.block_text.split("\n", 1)[0].partition("::")[2].strip())
        arg: list[str] = []
        extra: list[str] = []
        options: dict[str, str] = {}
        key = None
        for line in (self.arguments[0] if self.arguments else "").splitlines():
            m = _OPTION.match(line.strip())
            if m:
                key = m[1]
                value = (m[2] or "").strip()
                options[key] = f"{options[key]}; {value}" if key in options else value
            elif key is not None and line[:1].isspace():
                options[key] = f"{options[key]} {line.strip()}".strip()
            elif key is None and inline:
                arg.append(line)
            else:
                extra.append(line)
        return "\n".join(arg).strip(), options, extra

    def body(self, extra: list[str]) -> StringList:
        return StringList([*extra, *([""] if extra and self.content else []), *self.content])

    def parse_content(self, node: nodes.Element, extra: list[str], titles: bool = False
                      ) -> nodes.Element:
        lines = self.body(extra)
        if lines:
            self.state.nested_parse(lines, self.content_offset, node, match_titles=titles)
        return node

    def inline(self, node: nodes.Element, text: str) -> None:
        """Append ``text`` parsed as inline reST (roles rendered) as a paragraph."""
        if text.strip():
            parsed, messages = self.state.inline_text(text, self.lineno)
            node += nodes.paragraph("", "", *parsed)
            node += messages


class Null(Base):
    """Produces nothing (navigation, indexing, includes, layout)."""

    def run(self) -> list[nodes.Node]:
        return []


class Content(Base):
    """Keeps only the content (``only``, ``ifconfig``, ``hlist``, ``glossary``)."""

    def run(self) -> list[nodes.Node]:
        _, _, extra = self.head()
        if self.name.split(":")[-1] == "glossary":
            extra, self.content = _glossary_terms([*self.body(extra)]), StringList()
        return [self.parse_content(nodes.container(), extra,
                                   titles=self.name in ("only", "ifconfig"))]


def _glossary_terms(lines: list[str]) -> list[str]:
    """Sphinx's glossary allows several term lines per entry; docutils' definition
    list takes one, so consecutive term lines are joined with "; "."""
    out: list[str] = []
    for line in lines:
        is_term = bool(line.strip()) and not line[:1].isspace()
        if is_term and out and out[-1].strip() and not out[-1][:1].isspace():
            out[-1] = f"{out[-1]}; {line.strip()}"
        else:
            out.append(line)
    return out


class Code(Base):
    """``code-block``/``sourcecode``/``code``/doctest blocks: the content verbatim."""

    def run(self) -> list[nodes.Node]:
        _, _, extra = self.head()
        code = "\n".join(self.body(extra))
        return [nodes.literal_block(code, code)] if code.strip() else []


VERSION_LABELS = {
    "versionadded": "Added in version", "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version", "versionremoved": "Removed in version",
}


class VersionNote(Base):
    """``.. versionadded:: 3.9 [text]`` and its content: "Added in version 3.9: ..."."""

    def run(self) -> list[nodes.Node]:
        arg, _, extra = self.head()
        version, _, first = " ".join(arg.split()).partition(" ")
        node = labelled(label=f"{VERSION_LABELS[self.name.split(':')[-1]]} {version}".strip())
        self.inline(node, first)
        return [self.parse_content(node, extra)]


class SeeAlso(Base):
    def run(self) -> list[nodes.Node]:
        arg, _, extra = self.head()
        node = labelled(label="See also")
        self.inline(node, arg)  # Sphinx allows the first line on the directive line
        return [self.parse_content(node, extra)]


class Generic(Base):
    """Any directive nobody knows: argument, ``name: value`` options, content."""

    def run(self) -> list[nodes.Node]:
        arg, options, extra = self.head()
        node = generic(directive=self.name)
        self.inline(node, "\n".join([arg, *(f"{k}: {v}".strip() for k, v in options.items())]))
        return [self.parse_content(node, extra)]
