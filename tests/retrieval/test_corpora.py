"""Corpora from sdists: extraction, the atomic cache folder, one-line errors (no network)."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

import loom.retrieval.corpora as corpora
from loom.retrieval.corpora import CorpusError, CorpusSpec, ensure_corpus, extract_docs

SPEC = CorpusSpec("tiny", "tinypkg", "1.0", "doc/build", "sphinx", skip=("changelog",),
                  source="lib")
FILES = {
    "tinypkg-1.0/doc/build/index.rst": "Tiny\n====\n\nThe tiny docs.\n",
    "tinypkg-1.0/doc/build/orm/session.rst": "Session\n=======\n\nText.\n",
    "tinypkg-1.0/doc/build/changelog/changelog_10.rst": "Changes\n=======\n",
    "tinypkg-1.0/doc/build/logo.png": "\x89PNG",
    "tinypkg-1.0/doc/build/../../evil.rst": "outside",
    "tinypkg-1.0/lib/tinypkg/__init__.py": "x = 1\n",
    "tinypkg-1.0/lib/tinypkg/_speedups.c": "int x;\n",
    "tinypkg-1.0/README.rst": "Readme\n",
}


def make_sdist(folder: Path, files: dict[str, str] = FILES) -> Path:
    path = folder / "tinypkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_extract_docs_keeps_docs_text_files_minus_skipped_and_source_py_files(tmp_path: Path
                                                                              ) -> None:
    out = tmp_path / "out"
    extract_docs(SPEC, make_sdist(tmp_path), out)
    got = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert got == ["config.json", "docs/index.rst", "docs/orm/session.rst",
                   "src/tinypkg/__init__.py"]
    assert (out / "docs/orm/session.rst").read_text() == "Session\n=======\n\nText.\n"
    manifest = json.loads((out / "config.json").read_text())
    assert manifest["version"] == "1.0" and manifest["files"] == 2
    assert manifest["source"] == "lib" and manifest["source_files"] == 1
    assert manifest["sdist"] == "tinypkg-1.0.tar.gz" and manifest["skip"] == ["changelog"]


def test_extract_docs_reads_zip_sdists(tmp_path: Path) -> None:
    path = tmp_path / "tinypkg-1.0.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tinypkg-1.0/doc/build/index.rst", "Tiny\n====\n")
        z.writestr("tinypkg-1.0/setup.py", "")
    extract_docs(SPEC, path, tmp_path / "out")
    assert (tmp_path / "out/docs/index.rst").read_text() == "Tiny\n====\n"


def test_ensure_corpus_builds_the_cache_folder_once_then_reuses_it(tmp_path: Path,
                                                                   monkeypatch) -> None:
    sdist = make_sdist(tmp_path)
    calls = []

    def fake_download(spec: CorpusSpec, dest: Path) -> Path:
        calls.append(spec.name)
        return sdist

    monkeypatch.setattr(corpora, "download_sdist", fake_download)
    first = ensure_corpus(SPEC, cache_root=tmp_path / "cache")
    again = ensure_corpus(SPEC, cache_root=tmp_path / "cache")
    assert first.docs == again.docs == tmp_path / "cache/tiny-1.0/docs"
    assert first.src == tmp_path / "cache/tiny-1.0/src"
    assert (first.docs / "index.rst").is_file()
    assert calls == ["tiny"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["tiny-1.0"]


def test_folder_extracted_with_other_settings_is_extracted_again(tmp_path: Path,
                                                                 monkeypatch) -> None:
    sdist = make_sdist(tmp_path)
    monkeypatch.setattr(corpora, "download_sdist", lambda spec, dest: sdist)
    ensure_corpus(CorpusSpec("tiny", "tinypkg", "1.0", "doc/build", "sphinx"),
                  cache_root=tmp_path / "cache")
    again = ensure_corpus(SPEC, cache_root=tmp_path / "cache")  # now skipping changelog/
    assert not (again.docs / "changelog").exists() and (again.docs / "index.rst").is_file()


def test_missing_docs_folder_is_one_line_error_and_leaves_no_folder(tmp_path: Path,
                                                                     monkeypatch) -> None:
    sdist = make_sdist(tmp_path)
    monkeypatch.setattr(corpora, "download_sdist", lambda spec, dest: sdist)
    spec = CorpusSpec("tiny", "tinypkg", "1.0", "docs/en/docs", "markdown")
    with pytest.raises(CorpusError) as err:
        ensure_corpus(spec, cache_root=tmp_path / "cache")
    assert str(err.value) == ("corpus tiny: tinypkg-1.0.tar.gz has no docs/en/docs/ text files "
                              "(suffixes .rst, .md, .txt, .inc)")
    assert list((tmp_path / "cache").iterdir()) == []


def test_pip_that_cannot_find_the_sdist_is_one_line_corpus_error(tmp_path: Path,
                                                                monkeypatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: only the empty find-links folder
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    spec = CorpusSpec("tiny", "loom-no-such-package", "1.0", "docs", "markdown")
    with pytest.raises(CorpusError) as err:
        ensure_corpus(spec, cache_root=tmp_path / "cache")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("corpus tiny: pip could not download the loom-no-such-package==1.0 "
                          "sdist: ERROR: ")
    assert not (tmp_path / "cache/tiny-1.0").exists()


def test_sdist_with_another_hash_is_refused(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path)
    spec = CorpusSpec("tiny", "tinypkg", "1.0", "doc/build", "sphinx", sha256="0" * 64)
    with pytest.raises(CorpusError, match=r"^corpus tiny: tinypkg-1.0.tar.gz has sha256 "):
        corpora.check_sha256(spec, sdist)


def test_unknown_corpus_name_lists_the_known_ones() -> None:
    with pytest.raises(CorpusError) as err:
        ensure_corpus("nope")
    assert str(err.value) == ("unknown corpus 'nope'; known: attrs, click, fastapi, flask, itsdangerous, jinja, "
                              "marshmallow, packaging, sqlalchemy, structlog, werkzeug, stdlib")
