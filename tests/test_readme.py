"""The examples in README.md and docs/ run, so they cannot go stale; the README stays a front page.

Every ```python block runs as a script (cwd: a temp folder holding a copy of
README.md) unless the line before it is ``<!-- readme-test: skip -->``; the
README's blocks share one interpreter, and so do all docs pages' blocks (each in
fresh globals, in a folder of its page's own), and a block repeated word for word
on another page runs once.
A ```bash block runs when the line before it is ``<!-- readme-test: shell -->``.
A block of either kind marked ``<!-- readme-test: server -->`` runs while
``loom serve --no-auth`` serves the model ``$LOOM_MODEL`` names (no ``--model``:
SmolLM2-135M-Instruct in the test session, tests/conftest.py) on a free port (``localhost:8000`` in the block is
rewritten to that port); one server, started by the first such block, serves
them all.  Other blocks (the ``make`` commands, ``pip install``, commands that
need a long run or a GPU) are not run here.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<tag>\w+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)
BIN = Path(sys.executable).parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks() -> list[tuple[str, str, str, str]]:
    """(page, lang, tag, body) of every block this module runs."""
    out = []
    for page in PAGES:
        for m in BLOCK.finditer(page.read_text()):
            lang, tag = m["lang"], m["tag"] or ""
            if (lang == "python" and tag != "skip") or (lang == "bash" and tag in ("shell", "server")):
                out.append((str(page.relative_to(ROOT)), lang, tag, m["body"]))
    return out


BLOCKS = _blocks()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Port of one ``loom serve --no-auth`` on the default model, shared by every server block."""
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model

    workdir = tmp_path_factory.mktemp("server")
    port = _free_port()
    ensure_model(SMALL_MODEL)  # pulled once per machine; `loom serve` then finds it by name
    proc = subprocess.Popen(
        [str(BIN / "loom"), "serve", "--no-auth", "--port", str(port),
         "--db", f"sqlite:///{workdir / 'server.db'}", "--index", str(workdir / "server-index")],
        cwd=workdir, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        with httpx.Client(timeout=2) as client:  # one client for the polls: each new one loads the CA bundle (26 ms of CPU)
            while True:
                try:
                    if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError("loom serve exited during start-up")
                if time.monotonic() > deadline:
                    raise RuntimeError("loom serve did not become healthy in 180 s")
                time.sleep(0.5)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    head = "\n".join(lines[:40])
    assert "make demo" in head and "make test" in head
    assert not re.search(r"\bissues? #?\d+", text, re.I)


def test_readme_and_docs_have_runnable_examples() -> None:
    readme = {(lang, tag) for page, lang, tag, _ in BLOCKS if page == "README.md"}
    assert {("python", ""), ("bash", "shell"), ("python", "server")} <= readme
    assert ("bash", "server") in {(lang, tag) for _, lang, tag, _ in BLOCKS}
    assert any(page.startswith("docs/") for page, *_ in BLOCKS)


Example = tuple[str, str]  # (page, body)
Unit = tuple[str, str, str, list[Example]]  # (label, lang, tag, examples)


def units(pages: str) -> list[Unit]:
    """(label, lang, tag, examples) of the README's (``pages="README"``) or the docs' (``"docs"``)
    examples, each example a ``(page, body)``.  Python examples of one kind run in one interpreter
    (each in fresh globals, as a script, in a folder of its page's own): the README's as one unit,
    every docs page's as one unit (one interpreter for all pages, so torch, transformers and MiniLM
    load once rather than once a page); a shell example runs alone.  An example repeated word for
    word on another page runs once."""
    units: dict[tuple[str, str, str] | int, Unit] = {}
    seen: set[str] = set()
    for i, (page, lang, tag, body) in enumerate(BLOCKS):
        if body in seen:
            continue
        seen.add(body)  # README.md comes first: its examples are not repeated from docs/
        if (page == "README.md") != (pages == "README"):
            continue
        label = pages if lang == "python" else page
        key = (label, lang, tag) if lang == "python" else i
        units.setdefault(key, (label, lang, tag, []))[3].append((page, body))
    return list(units.values())


def unit_id(unit: Unit, i: int) -> str:
    """Test id of ``unit``: label, language, tag and position."""
    return f"{unit[0]}-{unit[1]}-{unit[2] or 'run'}-{i}"


UNITS = units("README")  # the docs pages' examples run in tests/test_docs_examples.py

# Runs each example of a JSON list of [folder, body] in order, each in fresh globals as ``python -c``
# would, with its page's folder as the working directory.
RUNNER = r"""
import json, os, sys, traceback
for n, (folder, body) in enumerate(json.load(open(sys.argv[1]))):
    os.chdir(folder)
    try:
        exec(compile(body, f"<example {n}>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    except BaseException:
        print(f"--- example {n} ({os.path.basename(folder)}) failed:\n{body}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


@pytest.mark.parametrize("unit", UNITS, ids=[unit_id(u, i) for i, u in enumerate(UNITS)])
def test_example_block_runs(unit: Unit, tmp_path: Path,
                            request: pytest.FixtureRequest) -> None:
    run_unit(unit, tmp_path, request)


def run_unit(unit: Unit, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Run one unit of :func:`units`, each page's examples in a folder of ``tmp_path`` holding a copy of
    README.md (examples may read it); fails with the examples' output."""
    label, lang, tag, examples = unit
    env = _env()
    if tag == "server":
        port = request.getfixturevalue("server_port")
        examples = [(page, b.replace("localhost:8000", f"localhost:{port}").replace("8000", str(port)))
                    for page, b in examples]
        env["OPENAI_BASE_URL"] = f"http://localhost:{port}/v1"
    folders = []
    for page, _ in examples:
        folder = tmp_path / page.replace("/", "-").removesuffix(".md")
        if not folder.exists():
            folder.mkdir()
            (folder / "README.md").write_text((ROOT / "README.md").read_text())
        folders.append(folder)
    if lang == "python":
        (tmp_path / ".examples.json").write_text(json.dumps([[str(f), b] for f, (_, b) in zip(folders, examples)]))
        cmd = [sys.executable, "-c", RUNNER, str(tmp_path / ".examples.json")]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", examples[0][1]]
    proc = subprocess.run(cmd, cwd=folders[0], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"{label}: {lang} example failed:\n--- stdout\n{proc.stdout[-3000:]}"
                                  f"\n--- stderr\n{proc.stderr[-3000:]}")
