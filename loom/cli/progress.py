"""Progress on stderr for the ``loom`` commands' long work (rich).

One policy for every command: bars and spinners go to stderr and are drawn only
when stderr is a terminal (rich draws nothing live on a pipe or a file, and a
spinner leaves no line behind), so stdout stays the command's data and a log file
gets no bar frames.  Work that counts (requests done, chunks embedded) gets a bar
(:func:`bar`); work that does not (a model loading, a pull converting) a spinner
(:func:`spinner`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


def stderr_console() -> Console:
    """The console progress and status lines go to."""
    return Console(stderr=True, highlight=False)


@contextmanager
def spinner(text: str) -> Iterator[None]:
    """A spinner with ``text`` on stderr while the block runs (nothing when stderr is not a terminal)."""
    with stderr_console().status(text):
        yield


@contextmanager
def bar() -> Iterator[Callable[[str, int, int], None]]:
    """A bar per task on stderr; yields ``update(task, done, total)`` to report progress with.

    Example::

        with bar() as update:
            update("variant base", 3, 10)
    """
    console = stderr_console()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=not console.is_terminal)
    tasks: dict[str, TaskID] = {}

    def update(task: str, done: int, total: int) -> None:
        if task not in tasks:
            tasks[task] = progress.add_task(task, total=total)
        progress.update(tasks[task], completed=done, total=total)

    with progress:
        yield update
