"""How loud ``loom`` is: warnings only by default, INFO and tracebacks with ``-v``.

``-v`` / ``--verbose`` is a global flag (``loom -v serve ...`` or ``loom serve ... -v``);
``LOOM_LOG_LEVEL`` (``debug``, ``info``, ``warning``, ...) sets the level too, and at
``info`` or below counts as verbose.  Quiet, the libraries in :data:`NOISY_LOGGERS`
show errors only, so no library line lands inside a progress bar or a streamed
answer (:func:`quiet_logs` also turns off the Hugging Face progress bars, once a
command is about to load a model).
"""

from __future__ import annotations

import logging
import os

# Libraries that log at INFO (or print progress) while a model, an embedder or an index loads, or on
# every HTTP call: a line of theirs in the middle of a streamed answer cuts it in two.
NOISY_LOGGERS = ("faiss", "faiss.loader", "httpx", "httpcore", "sentence_transformers", "transformers",
                 "huggingface_hub", "urllib3", "bm25s", "uvicorn.access", "filelock", "datasets")
VERBOSE_FLAGS = ("-v", "--verbose")

_verbose = False


def split_verbose(args: list[str]) -> tuple[list[str], bool]:
    """``args`` without the global ``-v`` / ``--verbose`` (anywhere before ``--``), and whether it was there."""
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a not in VERBOSE_FLAGS] + args[end:]
    return kept, len(kept) != len(args)


def level_from_env() -> int | None:
    """The level ``LOOM_LOG_LEVEL`` names (``None`` when unset or not a level name)."""
    name = os.environ.get("LOOM_LOG_LEVEL", "").strip().upper()
    level = logging.getLevelName(name) if name else None
    return level if isinstance(level, int) else None


def configure(verbose: bool) -> None:
    """Set up logging for one ``loom`` command: WARNING (quiet) or INFO (``verbose``), to stderr.

    The handler itself filters by level: a library that sets its own logger to DEBUG
    (bm25s does at import) is still held to the command's level.
    """
    global _verbose
    env = level_from_env()
    level = env if env is not None else logging.INFO if verbose else logging.WARNING
    _verbose = verbose or level <= logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)
    set_level(logging.getLevelName(level))
    if not _verbose:
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)


def set_level(name: str) -> None:
    """Hold the root logger and its handlers to level ``name`` (``"warning"``, ``"info"``, ...).

    Raises:
        ValueError: ``name`` is not a level name.
    """
    level = logging.getLevelName(name.upper())
    if not isinstance(level, int):
        raise ValueError(f"log level: {name!r} is not one of debug, info, warning, error, critical")
    logging.getLogger().setLevel(level)
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)


def is_verbose() -> bool:
    """Whether this command runs verbose (``-v`` or ``LOOM_LOG_LEVEL`` at INFO or below)."""
    return _verbose


def quiet_logs(verbose: bool | None = None) -> None:
    """Hold library logs and progress bars to the command's level, also when the libraries are loaded.

    Call it once a command is about to load models: transformers and the hub keep
    their own verbosity and progress-bar switches, set here (quiet: errors and no
    bars; verbose: warnings and bars; transformers at INFO dumps each model config).
    """
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    verbose = _verbose if verbose is None else verbose
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.ERROR)
    if verbose:
        hf_logging.set_verbosity_warning()
        hf_logging.enable_progress_bar()
        enable_progress_bars()
    else:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        disable_progress_bars()
