"""Starting and stopping a server process that evaluations and benchmarks drive over HTTP (``loom serve``,
``llama-server``): wait for its health check, then stop it gracefully, or kill it when it does not stop."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_until_healthy(proc: subprocess.Popen[bytes], health_url: str, timeout_s: float, poll_s: float = 0.25) -> bool:
    """Poll ``GET health_url`` until it answers 200 (``True``), or the process exits or ``timeout_s`` seconds
    pass (``False``)."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    return False


def terminate(proc: subprocess.Popen[bytes] | None, timeout_s: float = 30) -> None:
    """SIGTERM and wait up to ``timeout_s`` seconds, then SIGKILL; nothing for a process that has exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
