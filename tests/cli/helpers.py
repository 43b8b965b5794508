"""Run several ``loom`` command lines at once as real subprocesses (``python -m loom.cli``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_all(commands: dict[str, list[str]], cwd: Path, env: dict[str, str],
            timeout: float) -> dict[str, subprocess.CompletedProcess[str]]:
    """Start every command line, then wait for each (seconds each at most); results by name."""
    procs = {name: subprocess.Popen([sys.executable, "-m", "loom.cli", *args], cwd=cwd, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
             for name, args in commands.items()}
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out
