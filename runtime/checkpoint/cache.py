"""Loom's on-disk cache of model folders, written atomically.

Every folder Loom creates for a model (random-weight checkpoints, GGUF files
converted to Hugging Face folders, registered models) lives under
``$LOOM_CACHE`` (default ``~/.cache/loom``) and is built by
:func:`build_atomically`: the builder writes into a private temporary sibling,
which is renamed into place only when it finished. A crash, a wrong hash or a
conversion error therefore never leaves a half-written folder that a later run
would take for a good one, and two processes racing for the same folder both
end up using one complete copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

#: a folder counts as complete when this file is in it (every HF checkpoint has one)
COMPLETE_MARKER = "config.json"


def loom_cache_root() -> Path:
    """``$LOOM_CACHE``, else ``~/.cache/loom``."""
    root = os.environ.get("LOOM_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "loom"


def is_complete(folder: Path, marker: str = COMPLETE_MARKER) -> bool:
    """Whether ``folder`` is a finished cache entry (holds ``marker``)."""
    return (folder / marker).is_file()


def build_atomically(final: Path, build: Callable[[Path], object], marker: str = COMPLETE_MARKER) -> Path:
    """Create ``final`` by calling ``build(tmp)`` on an empty temporary sibling, then renaming it.

    Returns ``final`` at once when it is already complete (holds ``marker``). When another process
    renamed its own copy first, that copy is kept and ours is discarded.

    Raises:
        whatever ``build`` raises; the temporary folder is removed first and
        ``final`` is left as it was (absent).
    """
    if is_complete(final, marker):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared
        try:
            os.rename(tmp, final)
        except OSError:
            if not is_complete(final, marker):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
