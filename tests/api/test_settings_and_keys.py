"""Settings layering (flags > env > TOML) and hashed API keys, without a server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from loom.api.auth import create_key, hash_key, owner_of, revoke_key
from loom.api.settings import Settings
from loom.api.store import ApiKey, Store


def test_flags_beat_env_beat_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    toml = tmp_path / "loom.toml"
    toml.write_text('model = "/ckpt/from-toml"\nport = 7000\nhost = "0.0.0.0"\nmax_num_seqs = 8\n')
    monkeypatch.delenv("LOOM_MODEL", raising=False)  # the test session's (tests/conftest.py) would beat the file
    monkeypatch.setenv("LOOM_PORT", "7100")
    monkeypatch.setenv("LOOM_MAX_NUM_SEQS", "9")
    s = Settings.load(toml, max_num_seqs=10, host=None)
    assert (s.model, s.host, s.port, s.max_num_seqs) == ("/ckpt/from-toml", "0.0.0.0", 7100, 10)
    assert s.model_name == "from-toml"


def test_config_file_from_env_and_no_model_means_the_default_real_model_unless_loom_model_names_one(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    toml = tmp_path / "c.toml"
    toml.write_text("no_auth = true\n")
    monkeypatch.setenv("LOOM_CONFIG", str(toml))
    monkeypatch.delenv("LOOM_MODEL", raising=False)
    assert Settings.load().model == "qwen2.5-coder-0.5b-instruct"
    monkeypatch.setenv("LOOM_MODEL", "smollm2-135m-instruct")
    assert Settings.load().model == "smollm2-135m-instruct"
    assert Settings.load(model="/m").no_auth is True


def test_unknown_tool_call_parser_is_rejected():
    with pytest.raises(ValidationError, match="tool_call_parser"):
        Settings.load(model="/m", tool_call_parser="nope")


def test_unknown_setting_is_rejected(tmp_path: Path):
    toml = tmp_path / "c.toml"
    toml.write_text('model = "/m"\nmax_num_sequences = 3\n')
    with pytest.raises(ValidationError, match="max_num_sequences"):
        Settings.load(toml)


def test_keys_are_stored_as_sha256_and_resolve_to_their_owner(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'k.db'}")
    key = create_key(store, "alice")
    assert key.startswith("loom-") and len(key) > 40
    with store.tx() as s:
        row = s.query(ApiKey).one()
        assert row.key_hash == hashlib.sha256(key.encode()).hexdigest() == hash_key(key)
        assert key not in (row.key_hash, row.prefix)
    assert owner_of(store, key) == "alice"
    assert owner_of(store, key + "x") is None
    assert revoke_key(store, str(row.id)) == 1
    assert owner_of(store, key) is None


def test_a_bare_path_for_db_is_a_sqlite_file_on_the_command_line_and_in_process(tmp_path: Path):
    """``--db ./keys.db`` (a path, as ``loom chat --db`` takes one) opens that SQLite file, as its URL does."""
    import subprocess
    import sys

    created = subprocess.run([sys.executable, "-m", "loom.cli", "keys", "create", "--owner", "alice",
                              "--db", "keys.db"], cwd=tmp_path, capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    assert (tmp_path / "keys.db").is_file()
    key = created.stdout.split()[-1]
    assert owner_of(Store(f"sqlite:///{tmp_path / 'keys.db'}"), key) == "alice"  # the URL opens the same file
    assert owner_of(Store(str(tmp_path / "keys.db")), key) == "alice"
    with pytest.raises(ValueError, match="empty database URL"):
        Store(" ")


def test_serve_with_a_model_that_cannot_be_had_is_one_line_and_exit_2(tmp_path: Path):
    import subprocess
    import sys

    from tests.api.server import REPO

    proc = subprocess.run([sys.executable, "-m", "loom.cli", "serve", "--model", str(tmp_path / "nope.gguf"),
                           "--no-auth", "--port", "0"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "nope.gguf" in errors[0] and "loom model list" in errors[0]
    assert "Traceback" not in proc.stderr


def test_keys_create_refuses_an_empty_reserved_or_unsafe_owner_in_one_line(tmp_path: Path):
    """``api-key`` (the static --api-key) and ``local`` (--no-auth) would share their data; ``alice::x`` and
    ``alice/x`` could spell alice's memory namespaces and document keys."""
    import subprocess
    import sys

    from loom.api.auth import create_key
    from loom.api.store import Store

    store = Store(f"sqlite:///{tmp_path / 'k.db'}")
    for owner in ("", "api-key", "local", "alice::x", "alice/x", "a b"):  # in process: each a ValueError
        with pytest.raises(ValueError, match="^owner"):
            create_key(store, owner)
    for owner in ("api-key", "alice::x"):  # and through the command line: one line, exit code 2
        proc = subprocess.run([sys.executable, "-m", "loom.cli", "keys", "create", "--owner", owner,
                               "--db", f"sqlite:///{tmp_path / 'k.db'}"], capture_output=True, text=True)
        assert proc.returncode == 2, owner
        assert proc.stderr.startswith("error: owner") and "Traceback" not in proc.stderr, proc.stderr
