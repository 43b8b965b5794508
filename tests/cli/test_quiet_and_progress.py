"""Quiet by default, progress on a terminal: ``loom ingest`` and ``loom eval run`` as a user runs them.

With stderr a pipe, no log line and no bar frame (only the figures); with stderr a terminal (a
pseudo-terminal here), a bar of the work done; ``-v`` brings INFO logs back.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.api.server import _env

LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING)\b", re.MULTILINE)


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    for name in ("garden", "kitchen"):
        (folder / f"{name}.md").write_text(f"# {name.title()}\n\nNotes about the {name}: tomatoes and basil.\n")
    return folder


def _loom(*args: str, cwd: Path, tty: bool = False) -> tuple[int, str, str]:
    """Run ``loom ARGS``; (exit code, stdout, stderr), stderr through a pseudo-terminal when ``tty``."""
    env = {**_env(), "COLUMNS": "100"}
    cmd = [sys.executable, "-m", "loom.cli", *args]
    if not tty:
        run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        return run.returncode, run.stdout, run.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 x 100, as a window
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    stdout = proc.stdout.read().decode()
    os.close(master)
    return proc.wait(60), stdout, b"".join(chunks).decode(errors="replace")


def test_ingest_is_quiet_on_a_pipe_and_shows_a_bar_on_a_terminal(docs: Path, tmp_path: Path) -> None:
    code, stdout, stderr = _loom("ingest", str(docs), "--index", str(tmp_path / "pipe"), cwd=tmp_path)
    assert code == 0 and stderr == "" and stdout.startswith("2 documents (2 new/changed"), (stdout, stderr)
    code, stdout, stderr = _loom("ingest", str(docs), "--index", str(tmp_path / "tty"), cwd=tmp_path, tty=True)
    assert code == 0 and "embedding" in stderr and "2/2" in stderr, stderr
    assert not LOG_LINE.search(stderr), stderr


@pytest.mark.parametrize("mode", ["pipe", "tty", "verbose"])
def test_eval_run_is_quiet_shows_its_bar_on_a_terminal_and_logs_with_verbose(checkpoint_factory, tmp_path: Path,
                                                                            mode: str) -> None:
    args = ["eval", "run", "--suite", "throughput", "--model", str(checkpoint_factory()), "--num-requests", "4", "--warmup", "0",
            "--out", str(tmp_path / "out"), *(["-v"] if mode == "verbose" else [])]
    code, stdout, stderr = _loom(*args, cwd=tmp_path, tty=mode == "tty")
    assert code == 0, stderr
    assert "ok / failed" in stdout and "4 / 0" in stdout  # the figures, on stdout
    if mode == "pipe":
        assert stderr == ""
    elif mode == "tty":
        assert "base" in stderr and "4/4" in stderr and not LOG_LINE.search(stderr), stderr
    else:
        assert re.search(r"^INFO loom\.", stderr, re.MULTILINE), stderr
