"""Loaders: markup stripped by its library, headings kept as section paths."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from loom.retrieval import loaders
from loom.retrieval.loaders import iter_files, load_file, load_markdown, load_path, load_rst, load_text
from loom.retrieval.stdlib import load_stdlib


def test_markdown_loader_strips_markup_and_keeps_heading_path() -> None:
    doc = load_markdown("# Guide\n\nIntro *text*.\n\n## Install\n\n- `pip install x`\n\n"
                        "### Linux\n\n```sh\napt install x\n```\n", "g.md")
    assert doc.title == "Guide"
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("Guide", "Intro text."),
        ("Guide > Install", "pip install x"),
        ("Guide > Install > Linux", "apt install x"),
    ]


def test_rst_loader_uses_docutils_title_and_nested_sections() -> None:  # more: test_loaders_rst
    doc = load_rst("Manual\n======\n\nFirst para with ``code``.\n\nUsage\n-----\n\n"
                   "Run *it*.\n", "m.rst")
    assert doc.title == "Manual"
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("Manual", "First para with code."), ("Manual > Usage", "Run it.")]


def test_text_loader_title_is_first_non_empty_line() -> None:
    doc = load_text("\n\nHello there\nbody\n", "a.txt")
    assert doc.title == "Hello there"
    assert [s.text for s in doc.sections] == ["Hello there\nbody"]


def test_folder_walk_uses_glob_patterns_in_sorted_order(corpus: Path) -> None:
    names = [p.relative_to(corpus).as_posix() for p in iter_files(corpus)]
    assert names == ["asyncio.md", "notes.txt", "paths.rst", "sub/cooking.html"]
    assert [p.name for p in iter_files(corpus, ["*.md", "*.txt"])] == ["asyncio.md", "notes.txt"]
    docs = list(load_path(str(corpus)))
    assert [d.title for d in docs] == ["Asyncio guide", "Garden notes", "Path handling",
                                       "Bread recipes"]
    assert docs[0].metadata == {"format": "md"}


def test_missing_path_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(load_path(str(tmp_path / "nope")))


def test_non_utf8_file_raises_value_error_and_is_skipped_in_folders(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "good.txt").write_text("fine")
    with pytest.raises(ValueError, match="UTF-8"):
        load_file(tmp_path / "bad.txt")
    assert [d.title for d in load_path(str(tmp_path))] == ["fine"]


def test_failing_file_is_skipped_and_reported_while_the_rest_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken_loader(text: str, doc_id: str, title: str | None = None) -> NoReturn:
        raise RuntimeError("loader bug\nsecond line of the message")

    monkeypatch.setitem(loaders.LOADERS, ".rst", broken_loader)
    (tmp_path / "a.md").write_text("# A\n\nfine")
    (tmp_path / "b.rst").write_text("B\n=\n")
    (tmp_path / "c.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "d.txt").write_text("also fine")
    failures: list[tuple[str, str]] = []
    docs = list(load_path(str(tmp_path), failures=failures))
    assert [d.title for d in docs] == ["A", "also fine"]
    bad_utf8 = str((tmp_path / "c.txt").resolve())
    assert failures == [
        (str((tmp_path / "b.rst").resolve()), "RuntimeError: loader bug"),
        (bad_utf8, f"ValueError: path: {bad_utf8} is not UTF-8 text (invalid start byte)"),
    ]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and "RuntimeError: loader bug" in warned[0]
    assert [d.title for d in load_path(str(tmp_path))] == ["A", "also fine"]  # no list: logged only


def test_markdown_front_matter_fields_reach_document_metadata_with_format(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("---\ntitle: Page\ntags: [a, b]\n---\n\n# Heading\n\nBody.\n")
    doc = load_file(tmp_path / "p.md")
    assert doc.title == "Page"
    assert doc.metadata == {"tags": ["a", "b"], "format": "md"}


def test_stdlib_topic_is_split_at_underlined_headings() -> None:
    (doc,) = load_stdlib("topic/try")
    assert doc.id == "stdlib:topic/try"
    assert doc.title == 'The "try" statement'
    assert '"except" clause' in [s.heading for s in doc.sections]
    assert all("^^^" not in s.text and "***" not in s.text for s in doc.sections)


def test_stdlib_module_sections_are_qualified_names_with_signatures() -> None:
    (doc,) = load_stdlib("module/os.path")
    join = next(s for s in doc.sections if s.heading == "os.path.join")
    assert join.text.startswith("os.path.join(a, *p)")
    assert doc.metadata == {"kind": "module", "module": "os.path"}


def test_unknown_stdlib_part_raises_value_error_naming_path() -> None:
    with pytest.raises(ValueError, match="path"):
        list(load_stdlib("nonsense"))
