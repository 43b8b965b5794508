"""Let mkdocstrings read ``loom.runtime`` and its siblings from the root folders.

setup.py installs ``runtime/`` as ``loom.runtime`` (``package_dir``); griffe
reads packages from disk and knows only folder nesting.  Before the build this
hook lays the packages out as installed, in a temporary folder (a copy of
``loom/``'s modules, links to its subpackages and one link per root folder),
and points the python handler there.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

_layout: Path | None = None


def _folders(setup_py: Path) -> tuple[str, ...]:
    """The root folders setup.py maps into ``loom`` (its ``FOLDERS`` tuple, read without running it)."""
    for node in ast.parse(setup_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{setup_py}: no FOLDERS tuple")


@event_priority(100)  # before mkdocstrings reads its handlers' settings
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _layout
    root = Path(config.config_file_path).resolve().parent
    _layout = Path(tempfile.mkdtemp(prefix="loom-docs-"))
    package = _layout / "loom"
    package.mkdir()
    for entry in (root / "loom").iterdir():
        if entry.suffix == ".py":  # a copy: griffe would follow a link back to the real folder
            shutil.copy(entry, package / entry.name)
        elif entry.is_dir() and entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry, target_is_directory=True)
    for folder in _folders(root / "setup.py"):
        (package / folder).symlink_to(root / folder, target_is_directory=True)
    config.plugins["mkdocstrings"].config.handlers["python"]["paths"] = [str(_layout)]
    return config


def _clean() -> None:
    if _layout is not None:
        shutil.rmtree(_layout, ignore_errors=True)


def on_post_build(config: MkDocsConfig) -> None:
    _clean()


def on_build_error(error: Exception) -> None:
    _clean()
