"""Retrieval test fixtures: the real MiniLM embedder (loaded once) and small corpora."""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.retrieval.embedder import Embedder

# Words that are one all-MiniLM-L6-v2 word piece each, so token counts are exact.
WORDS = ("river stone cloud apple green house water light music paper table "
         "window garden summer winter market yellow silver orange forest").split()


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """all-MiniLM-L6-v2 on CPU; the model itself is cached per process."""
    e = Embedder(device="cpu")
    e.encode(["warm up"])
    return e


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """A folder of four small documents in four formats (one chunk per section)."""
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "asyncio.md").write_text(
        "# Asyncio guide\n\n## Gathering\n\nUse `asyncio.gather()` to run awaitables "
        "concurrently and collect their results.\n\n## Sleeping\n\nCall **asyncio.sleep** "
        "to suspend the current task for a number of seconds.\n")
    (root / "paths.rst").write_text(
        "Path handling\n=============\n\nJoining\n-------\n\nThe function ``os.path.join`` "
        "joins one or more path components intelligently.\n\nSplitting\n---------\n\n"
        "``os.path.splitext`` splits the extension from a pathname.\n")
    (root / "sub" / "cooking.html").write_text(
        "<html><head><title>Bread recipes</title><style>p{color:red}</style></head><body>"
        "<script>var x = 1;</script><h1>Bread</h1><h2>Sourdough</h2><p>Feed the starter "
        "flour and water the night before baking.</p></body></html>")
    (root / "notes.txt").write_text("Garden notes\n\nTomatoes need full sun and regular watering.\n")
    (root / "ignored.py").write_text("print('not a document')\n")
    return root
