"""Lay out Loom's packages as installed, for tools that read packages from disk.

setup.py installs the root folders as subpackages of ``loom`` (``runtime/`` is
``loom.runtime``, through ``package_dir``).  Tools that find modules by folder
nesting (mypy, griffe for the docs) cannot see that mapping, so they are
pointed at a folder laid out by :func:`lay_out`::

    <dest>/loom/__init__.py, version.py   loom/'s modules (links or copies)
    <dest>/loom/cli                       -> loom/cli
    <dest>/loom/runtime                   -> runtime/   (one per FOLDERS entry)

Not part of the installed package: used by docs/hooks/loom_layout.py and
tests/test_types.py.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def folders(setup_py: Path = ROOT / "setup.py") -> tuple[str, ...]:
    """The root folders setup.py maps into ``loom`` (its ``FOLDERS`` tuple, read without running it).

    Raises:
        RuntimeError: setup.py has no ``FOLDERS = (...)`` assignment.
    """
    for node in ast.parse(setup_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets):
            value = ast.literal_eval(node.value)
            return tuple(str(v) for v in value)
    raise RuntimeError(f"{setup_py}: no FOLDERS tuple")


def lay_out(dest: Path, root: Path = ROOT, *, copy_modules: bool = False) -> Path:
    """Build ``dest/loom`` as the installed package and return ``dest``.

    ``loom/``'s own modules are linked, or copied with ``copy_modules`` (griffe
    follows a link back to the real folder and then misses the subpackages);
    its subfolders and the root folders are always links.
    """
    package = dest / "loom"
    package.mkdir(parents=True)
    for entry in (root / "loom").iterdir():
        if entry.suffix == ".py":
            if copy_modules:
                shutil.copy(entry, package / entry.name)
            else:
                (package / entry.name).symlink_to(entry)
        elif entry.is_dir() and entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry, target_is_directory=True)
    for folder in folders(root / "setup.py"):
        (package / folder).symlink_to(root / folder, target_is_directory=True)
    return dest
