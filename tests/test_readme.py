"""The README's examples run, so they cannot go stale.

Every ```python block runs in a fresh interpreter (cwd: a temp folder) unless
the line before it is ``<!-- readme-test: skip -->``.  A ```bash block runs
when the line before it is ``<!-- readme-test: shell -->``.  A block of either
kind marked ``<!-- readme-test: server -->`` runs while ``loom serve --no-auth``
serves the default real model (no ``--model``: SmolLM2-135M-Instruct) on a free port (``localhost:8000`` in the
block is rewritten to that port).  The two ``make`` commands at the top are not
run here (they are what runs this suite).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<tag>\w+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)
BIN = Path(sys.executable).parent


def _blocks() -> list[tuple[str, str, str]]:
    text = (ROOT / "README.md").read_text()
    out = []
    for m in BLOCK.finditer(text):
        lang, tag = m["lang"], m["tag"] or ""
        if (lang == "python" and tag != "skip") or (lang == "bash" and tag in ("shell", "server")):
            out.append((lang, tag, m["body"]))
    return out


BLOCKS = _blocks()


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    from loom.runtime.checkpoint.registry import DEFAULT_MODEL, ensure_model

    port = _free_port()
    ensure_model(DEFAULT_MODEL)  # pulled once per machine; `loom serve` then finds it by name
    proc = subprocess.Popen(
        [str(BIN / "loom"), "serve", "--no-auth", "--port", str(port),
         "--db", f"sqlite:///{tmp_path / 'server.db'}", "--index", str(tmp_path / "server-index")],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("loom serve exited during start-up")
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("loom serve did not become healthy in 180 s")


def test_readme_has_runnable_examples() -> None:
    langs = [(lang, tag) for lang, tag, _ in BLOCKS]
    assert ("python", "") in langs and ("bash", "shell") in langs
    assert ("bash", "server") in langs and ("python", "server") in langs


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"{b[0]}-{b[1] or 'run'}-{i}" for i, b in enumerate(BLOCKS)])
def test_readme_block_runs(index: int, tmp_path: Path) -> None:
    lang, tag, body = BLOCKS[index]
    env = _env(tmp_path)
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text())  # examples may read it
    server = None
    try:
        if tag == "server":
            server, port = _serve(tmp_path, env)
            body = body.replace("localhost:8000", f"localhost:{port}").replace("8000", str(port))
            env["OPENAI_BASE_URL"] = f"http://localhost:{port}/v1"
        cmd = [sys.executable, "-c", body] if lang == "python" else ["bash", "-euo", "pipefail", "-c", body]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"README {lang} block failed:\n{body}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
