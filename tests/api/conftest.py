"""Fixtures: one shared real server (auth on, two owners' keys) per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import Server, new_key

# Small engine so tests are fast; a 1024-token window keeps an oversize prompt cheap to build.
ENGINE_FLAGS = ("--max-model-len", "1024", "--num-kv-blocks", "512", "--max-num-seqs", "64")


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    """Tiny random-weight Qwen3 checkpoint (created once, reused)."""
    from loom.runtime.checkpoint import ensure_checkpoint

    return ensure_checkpoint("qwen3", "tiny")


@pytest.fixture(scope="session")
def api_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("api")


@pytest.fixture(scope="session")
def db_url(api_workdir: Path) -> str:
    return f"sqlite:///{api_workdir / 'loom.db'}"


@pytest.fixture(scope="session")
def keys(db_url: str) -> dict[str, str]:
    """API keys of owners ``alice`` and ``bob``, made in process (``server.new_key``)."""
    return {owner: new_key(db_url, owner)
            for owner in ("alice", "bob")}


@pytest.fixture(scope="session")
def server(checkpoint: Path, db_url: str, api_workdir: Path, keys: dict[str, str]) -> Iterator[Server]:
    """The shared server (auth on)."""
    srv = Server(checkpoint, db_url, api_workdir, *ENGINE_FLAGS).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def model_name(server: Server, keys: dict[str, str]) -> str:
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {keys['alice']}"})
    return r.json()["data"][0]["id"]


@pytest.fixture
def alice(server: Server, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"},
                      timeout=120) as c:
        yield c


@pytest.fixture
def bob(server: Server, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['bob']}"},
                      timeout=120) as c:
        yield c


@pytest.fixture
def openai_client(server: Server, keys: dict[str, str]):  # noqa: ANN201
    import openai

    return openai.OpenAI(api_key=keys["alice"], base_url=server.url + "/v1", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def real_server(real_model: Path, real_quantization: str | None,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``loom serve`` on the real default model (SmolLM2, no tool support in its template) in the weight
    format its users get (``real_quantization``), no auth."""
    work = tmp_path_factory.mktemp("api-real")
    srv = Server(real_model, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--max-model-len", "2048",
                 "--num-kv-blocks", "512", "--quantization", real_quantization or "none").start()
    yield srv
    srv.stop()


@pytest.fixture
def real_client(real_server: Server):  # noqa: ANN201
    import openai

    return openai.OpenAI(api_key="unused", base_url=real_server.url + "/v1", max_retries=0, timeout=180)
