"""Let mkdocstrings read ``loom.runtime`` and its siblings from the root folders.

setup.py installs ``runtime/`` as ``loom.runtime`` (``package_dir``); griffe
reads packages from disk and knows only folder nesting.  Before the build this
hook lays the packages out as installed in a temporary folder
(``scripts/layout.py``, shared with the type check in ``tests/test_types.py``)
and points the python handler there.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from types import ModuleType

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

_layout: Path | None = None


def _layout_module(root: Path) -> ModuleType:
    """``scripts/layout.py``, imported from its path (``scripts/`` is not a package)."""
    spec = importlib.util.spec_from_file_location("loom_layout_script", root / "scripts" / "layout.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{root / 'scripts' / 'layout.py'}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@event_priority(100)  # before mkdocstrings reads its handlers' settings
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _layout
    root = Path(config.config_file_path).resolve().parent
    # loom/'s own modules copied: griffe follows a link back to the real folder
    _layout = _layout_module(root).lay_out(Path(tempfile.mkdtemp(prefix="loom-docs-")), root, copy_modules=True)
    config.plugins["mkdocstrings"].config.handlers["python"]["paths"] = [str(_layout)]
    return config


def _clean() -> None:
    if _layout is not None:
        shutil.rmtree(_layout, ignore_errors=True)


def on_post_build(config: MkDocsConfig) -> None:
    _clean()


def on_build_error(error: Exception) -> None:
    _clean()
