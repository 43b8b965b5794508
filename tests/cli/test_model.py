"""``loom model list`` and ``loom model rm`` as a user runs them, on a cache of their own (``LOOM_CACHE``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.api.server import _env


def _loom(*args: str, cache: Path, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**_env(), "LOOM_CACHE": str(cache), "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "loom.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_model_list_never_cuts_a_name_in_an_80_column_terminal(tmp_path: Path) -> None:
    from loom.runtime.checkpoint.registry import REGISTRY

    run = _loom("model", "list", cache=tmp_path)
    assert run.returncode == 0, run.stderr
    assert max(len(line) for line in run.stdout.splitlines()) <= 80
    rows = [line for line in run.stdout.splitlines() if line.startswith("│")]
    assert sorted(row.split("│")[1].strip().removesuffix(" *") for row in rows) == sorted(REGISTRY)
    assert "…" not in run.stdout


def test_model_rm_removes_the_converted_folder_and_says_which(tmp_path: Path) -> None:
    from loom.runtime.checkpoint.cache import build_atomically
    from loom.runtime.checkpoint.registry import SMALL_MODEL, REGISTRY, cached_path

    folder = cached_path(REGISTRY[SMALL_MODEL], tmp_path / "models")
    build_atomically(folder, lambda tmp: (tmp / "config.json").write_text("{}"))  # a finished cache entry
    assert "yes" in next(x for x in _loom("model", "list", cache=tmp_path).stdout.splitlines() if SMALL_MODEL in x)
    run = _loom("model", "rm", SMALL_MODEL, cache=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"removed {folder}" in run.stdout.splitlines() and not folder.exists()
    again = _loom("model", "rm", SMALL_MODEL, cache=tmp_path)
    assert again.returncode == 0 and again.stdout == ""
    assert again.stderr.strip() == f"{SMALL_MODEL} is not installed: nothing to remove"
