"""``loom serve`` as a user runs it: a busy port is one line before anything loads; started, it is
quiet (one line saying where it listens, no INFO line) and ``-v`` brings uvicorn's own lines back."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.api.server import _env


@pytest.fixture
def busy_port():
    """A port with a real listening socket on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_busy_port_is_one_line_before_the_model_loads(busy_port: int, tmp_path: Path, how: str) -> None:
    args = ["--port", str(busy_port)] if how == "flag" else []
    env = {**_env(), **({"LOOM_PORT": str(busy_port)} if how == "env" else {})}
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "loom.cli", "serve", "no-such-model-xyz", "--host", "127.0.0.1",
                          *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines() == [f"error: port {busy_port} on 127.0.0.1 is in use"]
    # the unknown model was never looked at; the time is the interpreter's start (well under 1 s on an
    # idle machine; bounded loosely here because the test machine's cores are shared)
    assert elapsed < 5, elapsed


def _serve(checkpoint: Path, workdir: Path, *extra: str) -> tuple[subprocess.Popen, str, list[str]]:
    """``loom serve`` on ``--port 0``; returns the process, the URL its one line names and stderr so far."""
    proc = subprocess.Popen([sys.executable, "-m", "loom.cli", "serve", str(checkpoint), "--port", "0", "--device",
                             "cpu", "--db", f"sqlite:///{workdir / 'loom.db'}", "--no-auth", *extra],
                            cwd=workdir, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "".join(lines)
        lines.append(line)
        found = re.search(r"^Loom serves \S+ at (http://127\.0\.0\.1:\d+) \(Ctrl-C stops\)$", line)
        if found:
            return proc, found.group(1), lines
    proc.kill()
    raise AssertionError("no listening line:\n" + "".join(lines))


@pytest.mark.parametrize("verbose", [False, True])
def test_serve_says_where_it_listens_and_logs_info_only_with_verbose(checkpoint_factory, tmp_path: Path,
                                                                    verbose: bool) -> None:
    proc, url, started = _serve(checkpoint_factory(), tmp_path, *(["-v"] if verbose else []))
    try:
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        httpx.get(url + "/version", timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    stderr = "".join(started) + stderr
    assert proc.returncode in (0, -signal.SIGTERM), stderr
    info = [line for line in (stdout + stderr).splitlines() if line.startswith("INFO")]
    if verbose:
        assert any("Application startup complete" in line for line in info)
        assert any('"GET /version HTTP/1.1" 200' in line for line in info)  # uvicorn's access log (stdout)
    else:
        assert info == [] and stdout == "", stdout + stderr
        assert "Traceback" not in stderr


def test_an_address_that_cannot_be_bound_is_one_line(tmp_path: Path) -> None:
    """``--host`` not of this machine (TEST-NET-1): the bind fails with another reason than a busy port."""
    run = subprocess.run([sys.executable, "-m", "loom.cli", "serve", "no-such-model-xyz", "--host", "192.0.2.1",
                          "--port", "8000"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: cannot listen on 192.0.2.1:8000: ") and len(run.stderr.splitlines()) == 1

