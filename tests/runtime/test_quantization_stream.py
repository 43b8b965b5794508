"""Quantizing a checkpoint while reading it gives, tensor for tensor, what quantizing the loaded float model
gives: from safetensors in row blocks (random-weight checkpoints with q/k/v biases and an untied head, and
with a tied one) and from the default model's GGUF (dequantized block by block, q/k rows permuted back as
transformers does), never through a float copy of the model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from loom.runtime.checkpoint import tensors
from loom.runtime.models.loader import load_hf_config, load_model
from loom.runtime.quantization import quantize_model
from loom.runtime.quantization.stream import quantize_checkpoint
from tests.runtime.helpers import gguf_only_folder

CPU = torch.device("cpu")


def _assert_same_state(streamed: torch.nn.Module, loaded: torch.nn.Module) -> None:
    a, b = streamed.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert not differ, differ[:5]


def _float_then_quantized(path: Path, method: str) -> torch.nn.Module:
    return quantize_model(load_model(path, load_hf_config(path), dtype=torch.float32, device=CPU), method, 32)


@pytest.mark.parametrize(("arch", "tied"), [("qwen2", False), ("llama", True)])
@pytest.mark.parametrize("method", ["int8", "int4"])
def test_quantizing_safetensors_in_row_blocks_equals_quantizing_the_loaded_float_model(
        tiny_checkpoint, monkeypatch, arch, tied, method):
    path = tiny_checkpoint(arch, tie_word_embeddings=tied)
    monkeypatch.setattr(tensors, "ROW_BLOCK_ELEMENTS", 4096)  # the embedding and head come in several blocks
    cfg = load_hf_config(path)
    streamed = quantize_checkpoint(path, cfg, method=method, group_size=32, dtype=torch.float32, max_positions=None)
    _assert_same_state(streamed, _float_then_quantized(path, method))


def test_int8_straight_from_the_gguf_equals_int8_of_the_float_weights_transformers_wrote(real_model, tmp_path):
    folder = gguf_only_folder(real_model, tmp_path / "smollm2")
    streamed = quantize_checkpoint(folder, load_hf_config(folder), method="int8", group_size=32,
                                   dtype=torch.float32, max_positions=None)
    _assert_same_state(streamed, _float_then_quantized(real_model, "int8"))


def test_a_tensor_of_the_wrong_shape_is_a_value_error_naming_it(tiny_checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file

    path = Path(shutil.copytree(tiny_checkpoint("qwen3"), tmp_path / "bad"))
    state = load_file(path / "model.safetensors")
    name = "model.layers.0.self_attn.k_proj.weight"
    state[name] = state[name][:-1].contiguous()
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="k_proj"):
        quantize_checkpoint(path, load_hf_config(path), method="int8", group_size=32, dtype=torch.float32,
                            max_positions=None)
