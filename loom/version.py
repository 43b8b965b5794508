"""The installed distribution's name and version: one leaf module that every layer may import.

``loom-llm`` is the name on PyPI (``pip install loom-llm``); the import name is ``loom``.
"""

from __future__ import annotations

DISTRIBUTION = "loom-llm"


def loom_version() -> str:
    """The installed ``loom-llm`` version, e.g. ``"0.1.0"`` (``"0.0.0+unknown"`` in a never-installed tree).

    Reads the installed metadata (about 15 ms the first time), so callers ask only when needed.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0.0.0+unknown"
