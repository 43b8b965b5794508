"""A real ``loom serve`` process on loopback for the API tests.

The server runs in a subprocess (``python -m loom.cli serve``) with the real
engine on a tiny random-weight checkpoint and a real SQLite file, so tests can
stop it, SIGKILL it mid-turn and start a new process on the same database.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]

#: One client for the helpers' polls of ``/health``: every new ``httpx`` client (and ``httpx.get``
#: makes one per call) loads the CA bundle, about 26 ms of CPU, which start-up polls paid 4 times a second.
LOOPBACK = httpx.Client()


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_key(db: str, owner: str) -> str:
    """An API key of ``owner`` in the database at URL ``db`` (its tables made first when missing): what
    ``loom keys create --owner OWNER --db DB`` prints, made in this process (tests/api/test_settings_and_keys.py
    runs the command itself), without a process start's ~2 s of imports."""
    from loom.api.auth import create_key
    from loom.api.store import Store

    store = Store(db)
    try:
        return create_key(store, owner)
    finally:
        store.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")
    return env


class Server:
    """One ``loom serve`` subprocess; ``url`` is its base URL."""

    def __init__(self, model: Path, db_url: str, workdir: Path, *extra: str, port: int | None = None) -> None:
        self.model, self.db_url, self.workdir, self.extra = model, db_url, workdir, extra
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"server-{self.port}-{int(time.time() * 1000)}.log"

    def command(self) -> list[str]:
        """The ``loom serve`` command line (subclasses change how the model is given)."""
        return [sys.executable, "-m", "loom.cli", "serve", "--model", str(self.model), "--db", self.db_url,
                "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "info",
                *self.extra]

    health_path = "/health"

    def start(self, timeout: float = 240) -> Server:
        """Start and wait until ``health_path`` answers (raises with the log tail if it dies)."""
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=_env())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.log()[-4000:]}")
            try:
                if LOOPBACK.get(self.url + self.health_path, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.kill()
        raise RuntimeError(f"server did not start in {timeout}s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (graceful: drain, then stop the engine) and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if not self._log.closed:
                self._log.close()

    def kill(self) -> None:
        """SIGKILL: the process dies at once, as in a crash (no-op once it has exited)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        if not self._log.closed:
            self._log.close()

    def health(self) -> dict:
        """``GET /health`` as a dict."""
        return LOOPBACK.get(self.url + "/health", timeout=10).json()

    def wait_idle(self, timeout: float = 60) -> dict:
        """Wait until the engine runs and waits for nothing; returns ``/health``."""
        deadline = time.monotonic() + timeout
        h = self.health()
        while time.monotonic() < deadline:
            h = self.health()
            e = h["engine"]
            if e["num_running"] == 0 and e["num_waiting"] == 0 and h["in_flight"] == 0:
                return h
            time.sleep(0.1)
        raise AssertionError(f"server not idle after {timeout}s: {h}")


def hang_up_midway(server: Server, key: str, path: str, body: dict, stream: bool) -> tuple[dict, dict]:
    """POST ``body`` to ``path`` and go away mid-answer: after 13 stream lines, or (not streamed)
    after a 0.2 s read timeout (the server notices within its 0.25 s disconnect poll: on 2 AVX-512 cores
    the tiny model made 4,176 of 8 x 1,000 tokens before the abort after a 0.5 s timeout, too close to
    all of them to tell an abort).  Returns the engine stats before and after (server idle both times)."""
    before = server.wait_idle()["engine"]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"},
                      timeout=60 if stream else 0.2) as c:
        if stream:
            with c.stream("POST", path, json={**body, "stream": True}) as resp:
                assert resp.status_code == 200
                for i, _ in enumerate(resp.iter_lines()):
                    if i > 12:
                        break
        else:
            try:
                c.post(path, json={**body, "stream": False})
            except httpx.ReadTimeout:
                pass
            else:
                raise AssertionError(f"{path} answered within 0.2 s: nothing was left to abort")
    return before, server.wait_idle()["engine"]


def keyed_server(model: Path | str, workdir: Path, owner: str, *extra: str) -> tuple[Server, str]:
    """A started ``loom serve`` of ``model`` on a new SQLite database in ``workdir`` (``extra``: more
    ``loom serve`` flags), and an API key of ``owner`` (:func:`new_key`)."""
    db = f"sqlite:///{workdir / 'loom.db'}"
    key = new_key(db, owner)
    return Server(Path(model), db, workdir, *extra).start(), key


def raw_request(server: Server, path: str, headers: dict[str, str], sent: bytes, declared: int) -> bytes:
    """Send headers and only ``sent`` of a ``declared``-byte body, then read the answer (2 s at most)."""
    host, port = "127.0.0.1", server.port
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
             f"Content-Length: {declared}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall("\r\n".join(lines).encode() + sent)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    return answer


def status_and_body(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head, "no answer before the body was complete: the server waited for it"
    return int(head.split()[1]), json.loads(body[body.index(b"{"):])


async def concurrent_uploads(url: str, body: bytes, clients: int, headers: dict[str, str] | None = None,
                             timeout: float = 120) -> list[int | str]:
    """POST ``body`` to ``url``'s ``/v1/chat/completions`` from ``clients`` connections at once; each one's
    status code, or the name of the transport error it got instead (a reset: ``ReadError``)."""
    import asyncio

    async with httpx.AsyncClient(base_url=url, timeout=timeout, headers=headers or {}) as c:
        async def post() -> int | str:
            try:
                return (await c.post("/v1/chat/completions", content=body,
                                     headers={"content-type": "application/json"})).status_code
            except httpx.TransportError as exc:
                return type(exc).__name__

        return list(await asyncio.gather(*(post() for _ in range(clients))))
