"""Sampling defaults of a model (vLLM's ``--generation-config``): read from ``generation_config.json``,
filled from the registry for a registered model's converted folder, off with ``vllm``, and a bad
file or value is a ``ValueError`` naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loom.runtime.checkpoint.generation_config import default_sampling
from loom.runtime.checkpoint.registry import REGISTRY, cached_path


def _folder(path: Path, config: dict | str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    (path / "generation_config.json").write_text(text)
    return path


def test_sampling_fields_and_max_new_tokens_are_read_and_the_rest_ignored(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "m", {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                      "min_p": 0.0, "repetition_penalty": 1.05, "max_new_tokens": 256,
                                      "eos_token_id": [1, 2], "pad_token_id": 0})
    assert default_sampling(folder) == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
                                        "repetition_penalty": 1.05, "max_tokens": 256}
    assert default_sampling(folder, "vllm") == {}
    other = _folder(tmp_path / "other", {"temperature": 0.0})
    assert default_sampling(folder, str(other)) == {"temperature": 0.0}


def test_a_registered_models_folder_takes_the_registrys_sampling_where_its_file_has_none(tmp_path: Path) -> None:
    model = REGISTRY["qwen2.5-coder-0.5b-instruct"]
    folder = _folder(cached_path(model, tmp_path), {"bos_token_id": 1, "temperature": 0.3})
    assert default_sampling(folder) == {**model.sampling, "temperature": 0.3}
    assert default_sampling(folder, "vllm") == {}
    assert default_sampling(_folder(tmp_path / "plain", {"bos_token_id": 1})) == {}


@pytest.mark.parametrize(("config", "named"), [("{not json", "cannot be read as JSON"),
                                               ({"temperature": -1}, "temperature"),
                                               ({"top_p": 1.5}, "top_p")])
def test_a_bad_file_or_value_is_a_value_error_naming_it(tmp_path: Path, config, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        default_sampling(_folder(tmp_path / "m", config))


def test_a_source_that_is_no_folder_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not 'auto', 'vllm' or a folder"):
        default_sampling(tmp_path, str(tmp_path / "missing"))
