"""``loom bench cpu`` names llama.cpp's side by the GGUF's quantization type, as llama.cpp spells it."""

from __future__ import annotations

import pytest

from loom.runtime.bench.cpu import gguf_type


@pytest.mark.parametrize(("file_name", "label"), [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
    ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),  # was "5b-instruct-q4_k_m": split at the version's dot
    ("Qwen2.5-Coder-1.5B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
    ("model.f16.gguf", "F16"),
    ("plain.gguf", "plain"),
])
def test_llama_cpp_sides_are_named_by_the_ggufs_quantization_type(file_name, label):
    assert gguf_type(file_name) == label
