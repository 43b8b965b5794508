"""mypy over every package, as installed: the type hints are checked, not only written.

The root folders install as ``loom.runtime``, ``loom.orchestrator``, ... (setup.py's
``package_dir``), which mypy cannot see from the checkout; ``scripts/layout.py`` lays
the packages out as installed (links into the checkout) and mypy runs on that with
the settings in pyproject.toml (``[tool.mypy]``).  The cache persists in
``.mypy_cache`` at the repository root, so a run after a small change takes seconds.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _layout() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loom_layout_script", ROOT / "scripts" / "layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(900)  # a cold cache: about 25 s on one core (pyproject.toml skips unused parts of big dependencies)
def test_mypy_finds_no_errors_in_the_installed_packages(tmp_path: Path) -> None:
    layout = _layout().lay_out(tmp_path / "layout")
    env = {**os.environ, "MYPYPATH": str(layout)}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "loom"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    # error lines name the laid-out copy; show them as checkout paths
    report = (proc.stdout + proc.stderr).replace(str(layout / "loom") + os.sep, "")
    assert proc.returncode == 0, f"mypy found errors:\n{report}"
