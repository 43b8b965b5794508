"""``loom serve MODEL`` with vLLM's engine and server flags, on one real server (tiny random checkpoint):
the engine flags reach ``EngineConfig``, a static ``--api-key`` works beside the key database, CORS
answers a browser's preflight, ``--root-path`` serves under a prefix without opening a hole in auth,
``/version`` needs no key."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.api.server import Server, new_key

STATIC_KEY = "static-test-key-0123456789"
ORIGIN = "http://app.example"
SPEC = {"method": "ngram", "num_speculative_tokens": 2}
BODY_RATE = 1 << 20  # --large-body-bytes-per-s: 1 MiB a second (the bucket holds one second)


class PositionalServer(Server):
    """``loom serve MODEL ...``: the model as ``vllm serve`` takes it, no ``--model``."""

    health_path = "/loom/health"  # served under --root-path /loom

    def command(self) -> list[str]:
        return [sys.executable, "-m", "loom.cli", "serve", str(self.model), "--db", self.db_url,
                "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "info",
                *self.extra]


GENERATION_CONFIG = {"do_sample": True, "temperature": 0.0, "repetition_penalty": 1.2, "max_new_tokens": 6,
                     "eos_token_id": 2}


@pytest.fixture(scope="module")
def options_server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """The server with every option under test, and a key from its database (owner ``carol``)."""
    work = tmp_path_factory.mktemp("api-options")
    db = f"sqlite:///{work / 'loom.db'}"
    db_key = new_key(db, "carol")
    (work / "gen").mkdir()
    (work / "gen" / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    srv = PositionalServer(
        checkpoint, db, work, "--block-size", "32", "--no-enable-prefix-caching", "--max-num-batched-tokens", "256",
        "--max-model-len", "512", "--num-kv-blocks", "64", "--max-num-seqs", "4", "--gpu-memory-utilization", "0.5",
        "--dtype", "float32", "--quantization", "int8", "--speculative-config", json.dumps(SPEC), "--api-key", STATIC_KEY,
        "--allowed-origins", json.dumps([ORIGIN]), "--root-path", "/loom", "--disable-uvicorn-access-log",
        "--generation-config", str(work / "gen"), "--large-body-bytes-per-s", str(BODY_RATE),
    ).start()
    yield srv, db_key
    srv.stop()


def _client(srv: Server, key: str, prefix: str = "/loom") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=srv.url + prefix + "/v1", max_retries=0, timeout=120)


def test_engine_flags_reach_the_engine_config_reported_by_health(options_server) -> None:
    srv, _ = options_server
    health = httpx.get(srv.url + "/loom/health", timeout=10).json()
    config = health["config"]
    assert {k: config[k] for k in ("block_size", "enable_prefix_caching", "max_num_batched_tokens", "max_model_len",
                                    "num_kv_blocks", "max_num_seqs", "gpu_memory_utilization", "dtype", "device")} == {
        "block_size": 32, "enable_prefix_caching": False, "max_num_batched_tokens": 256, "max_model_len": 512,
        "num_kv_blocks": 64, "max_num_seqs": 4, "gpu_memory_utilization": 0.5, "dtype": "float32", "device": "cpu"}
    assert config["quantization"] == "int8"
    assert config["speculative_config"]["method"] == "ngram"
    assert config["speculative_config"]["num_speculative_tokens"] == 2
    assert health["engine"]["kv_blocks_total"] == 64
    assert "64 blocks x 32 tokens" in srv.log()  # the pool the engine built


def test_large_bodies_are_read_within_the_rate_budget_while_small_requests_do_not_wait(options_server) -> None:
    """A 3.25 MiB body pays for the 3 MiB past its free 256 KiB: at 1 MiB/s with one second in the bucket it takes
    at least 2 s to arrive; a small request sent meanwhile is answered before it (and the big one gets its 400:
    the message cannot fit the 512-token window)."""
    import threading
    import time

    srv, key = options_server
    headers = {"Authorization": f"Bearer {STATIC_KEY}", "content-type": "application/json"}
    model = httpx.get(srv.url + "/loom/v1/models", headers=headers, timeout=10).json()["data"][0]["id"]
    big = b'{"model": "%s", "messages": [{"role": "user", "content": "%s"}]}' % (model.encode(), b"x" * (13 << 18))
    done: dict[str, float] = {}

    def post_big() -> None:
        t0 = time.monotonic()
        r = httpx.post(srv.url + "/loom/v1/chat/completions", content=big, headers=headers, timeout=60)
        done["big"], done["big_status"] = time.monotonic() - t0, r.status_code

    thread = threading.Thread(target=post_big)
    start = time.monotonic()
    thread.start()
    time.sleep(0.5)  # the big body is arriving, over budget
    r = httpx.post(srv.url + "/loom/tokenize", json={"prompt": "hi"}, headers=headers, timeout=60)
    small_at = time.monotonic() - start
    thread.join()
    assert r.status_code == 200, r.text
    assert done["big_status"] == 400
    assert done["big"] >= 1.8, done  # 3 MiB paid, 1 MiB in the bucket: 2 s at 1 MiB/s
    assert small_at < done["big"], (small_at, done)  # the small request did not queue behind the big one


def test_generation_config_sets_the_sampling_of_requests_that_set_none(options_server) -> None:
    """--generation-config (vLLM's): its temperature 0 makes requests without one greedy (the random model
    would draw different replies at temperature 1), its max_new_tokens their max_tokens; a request's own
    fields win."""
    srv, _ = options_server
    assert httpx.get(srv.url + "/loom/health", timeout=10).json()["config"]["default_sampling"] == {
        "temperature": 0.0, "repetition_penalty": 1.2, "max_tokens": 6}
    client = _client(srv, STATIC_KEY)
    messages = [{"role": "user", "content": "Tell me a story about a lighthouse."}]
    plain = [client.chat.completions.create(model="loom", messages=messages) for _ in range(2)]
    assert plain[0].choices[0].message.content == plain[1].choices[0].message.content
    assert [p.usage.completion_tokens for p in plain] == [6, 6]
    explicit = client.chat.completions.create(model="loom", messages=messages, temperature=0, max_tokens=6,
                                              extra_body={"repetition_penalty": 1.2})
    assert explicit.choices[0].message.content == plain[0].choices[0].message.content
    text = client.completions.create(model="loom", prompt="Once upon a time", max_tokens=12)
    assert text.usage.completion_tokens == 12


def test_no_enable_prefix_caching_serves_a_repeated_prompt_without_cached_tokens(options_server) -> None:
    srv, _ = options_server
    client = _client(srv, STATIC_KEY)
    messages = [{"role": "user", "content": "a prompt long enough to fill two blocks of thirty-two tokens " * 4}]
    model = httpx.get(srv.url + "/loom/health", timeout=10).json()["model"]
    usages = [client.chat.completions.create(model=model, messages=messages, max_tokens=2, temperature=0).usage
              for _ in range(2)]
    assert usages[1].prompt_tokens > 64
    assert usages[1].prompt_tokens_details is None or usages[1].prompt_tokens_details.cached_tokens == 0


def test_static_api_key_works_beside_database_keys_and_runs_as_owner_api_key(options_server) -> None:
    from loom.api.store import Store

    srv, db_key = options_server
    created = httpx.post(srv.url + "/loom/v1/sessions", json={}, timeout=30,
                         headers={"Authorization": f"Bearer {STATIC_KEY}"})
    assert created.status_code == 200, created.text
    assert _client(srv, db_key).models.list().data  # the database's key still works
    with pytest.raises(openai.AuthenticationError):
        _client(srv, STATIC_KEY + "x").models.list()
    store = Store(srv.db_url)
    try:
        assert store.get_session(created.json()["id"], "api-key") is not None
        assert store.get_session(created.json()["id"], "carol") is None
    finally:
        store.close()


def test_root_path_serves_with_and_without_the_prefix_and_both_need_a_key(options_server) -> None:
    srv, db_key = options_server
    auth = {"Authorization": f"Bearer {db_key}"}
    for path in ("/loom/v1/models", "/v1/models"):  # a proxy that keeps the prefix, one that strips it
        assert httpx.get(srv.url + path, timeout=10).status_code == 401, path
        assert httpx.get(srv.url + path, headers=auth, timeout=10).status_code == 200, path
    spec = httpx.get(srv.url + "/loom/openapi.json", timeout=10).json()
    assert {"url": "/loom"} in spec["servers"]


def test_cors_answers_an_allowed_origins_preflight_without_a_key_and_not_another_origin(options_server) -> None:
    srv, _ = options_server
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    ok = httpx.options(srv.url + "/loom/v1/chat/completions", headers={"Origin": ORIGIN, **ask}, timeout=10)
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in ok.headers["access-control-allow-methods"]
    other = httpx.options(srv.url + "/loom/v1/chat/completions", headers={"Origin": "http://evil.example", **ask},
                          timeout=10)
    assert "access-control-allow-origin" not in other.headers
    unauthorized = httpx.get(srv.url + "/loom/v1/models", headers={"Origin": ORIGIN}, timeout=10)
    assert unauthorized.status_code == 401  # the browser can read the 401: it carries the CORS header
    assert unauthorized.headers["access-control-allow-origin"] == ORIGIN


def test_version_needs_no_key_and_is_the_installed_version(options_server) -> None:
    import loom

    srv, _ = options_server
    r = httpx.get(srv.url + "/loom/version", timeout=10)
    assert r.status_code == 200 and r.json() == {"version": loom.__version__}


def test_disable_uvicorn_access_log_leaves_no_line_per_request(options_server) -> None:
    srv, _ = options_server
    httpx.get(srv.url + "/loom/version", timeout=10)
    log = srv.log()
    assert "Uvicorn running on" in log  # uvicorn's startup lines stay
    assert '"GET /loom/version HTTP/1.1" 200' not in log


def test_cors_is_off_unless_allowed_origins_is_given() -> None:
    from fastapi.testclient import TestClient

    from loom.api.app import create_app
    from loom.api.settings import Settings

    app = create_app(Settings.load(model="/unused", db="sqlite://"))  # no lifespan: nothing loads
    r = TestClient(app).options("/v1/models", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in r.headers


def test_loom_api_key_env_is_the_static_key_and_a_near_miss_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from loom.api.auth import check_key
    from loom.api.errors import AuthenticationError
    from loom.api.settings import Settings
    from loom.api.store import Store

    monkeypatch.setenv("LOOM_API_KEY", STATIC_KEY)
    settings = Settings.load(model="/m")
    assert STATIC_KEY not in repr(settings)  # a secret: never in a settings dump or log line
    static = settings.api_key.get_secret_value()
    store = Store(f"sqlite:///{tmp_path / 'k.db'}")
    try:
        assert check_key(store, f"Bearer {STATIC_KEY}", static) == "api-key"
        for wrong in (STATIC_KEY[:-1], STATIC_KEY + "0", STATIC_KEY.upper()):
            with pytest.raises(AuthenticationError):
                check_key(store, f"Bearer {wrong}", static)
    finally:
        store.close()
