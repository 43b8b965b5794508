"""The docs site builds cleanly and its pages stay true to the repository.

``mkdocs build --strict`` fails on any warning: a broken link, a page that
cannot be read, an API reference entry griffe cannot find or a docstring it
cannot parse.  (The examples on the pages run in ``tests/test_readme.py``.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
# a file or folder of this repository named in running text (not in a code block)
REPO_PATH = re.compile(r"`((?:runtime|orchestrator|retrieval|memory|tools|api|evals|tests|loom|benchmarks)/[\w./-]*)`")
FENCE = re.compile(r"```.*?```", re.S)


def _nav_pages(nav: list) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return out


def test_mkdocs_build_strict_succeeds(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "runtime" / "index.html").read_text().count("SamplingParams") > 1


def test_every_docs_page_is_in_the_nav() -> None:
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_pages_name_only_files_that_exist_and_no_issue_numbers() -> None:
    for page in PAGES:
        text = page.read_text()
        assert not re.search(r"\bissues? #?\d+", text, re.I), page
        missing = [p for p in REPO_PATH.findall(FENCE.sub("", text)) if not (ROOT / p).exists()]
        assert not missing, f"{page.relative_to(ROOT)} names files not in the repository: {missing}"


def test_no_source_file_cites_an_issue_or_a_document_outside_the_repository() -> None:
    """Code and its comments stand on their own: no tracker numbers, no design notes kept elsewhere."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.md", "*.toml"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    cited = [f for f in files if f != "tests/test_docs.py" and (ROOT / f).is_file()
             and re.search(r"\bissues? #?\d+\b|ARCHITECTURE\.md|STYLE\.md|\.\./shared/", (ROOT / f).read_text(), re.I)]
    assert cited == []
