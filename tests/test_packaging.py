"""The built wheel installs one namespace, ``loom``, and the ``loom`` command.

The folders stay at the repository root (``runtime/``, ``orchestrator/``, ...);
setup.py maps each to its package (``loom.runtime``, ...).  A wheel built from
a copy of the checkout (so no stale ``build/`` folder can leak in) must hold
``loom/`` and its ``.dist-info`` and nothing else at its top, every source
module under its ``loom.*`` name, and the console script pointing into it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("runtime", "orchestrator", "retrieval", "memory", "tools", "api", "evals")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(src)], check=True, capture_output=True, text=True)
    (built,) = out.glob("loom_llm-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_holds_only_the_loom_namespace_at_its_top(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"loom"}
    assert len(dist_info) == 1 and dist_info.pop().startswith("loom_llm-")


def test_every_source_module_is_in_the_wheel_under_its_loom_name(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = {f"loom/{p.relative_to(ROOT)}" for f in FOLDERS for p in (ROOT / f).rglob("*.py")}
    expected |= {str(p.relative_to(ROOT)) for p in (ROOT / "loom").rglob("*.py")}
    assert expected - names == set()
    assert "loom/runtime/checkpoint/chat_template.jinja" in names  # package data travels too
    kernels = {f"loom/{p.relative_to(ROOT)}" for p in (ROOT / "runtime" / "kernels").iterdir()
               if p.suffix in (".cpp", ".h")}
    assert kernels and kernels - names == set()  # the CPU kernels' sources, compiled on first use


def test_console_script_is_the_loom_cli(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "loom = loom.cli:main" in wheel.read(entry_points).decode()
