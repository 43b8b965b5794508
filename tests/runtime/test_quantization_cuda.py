"""Quantized layers and engines on CUDA: the int8 Triton kernel and PyTorch's tinygemm int4 kernel compute the
grid quantized on CPU, and an engine on a GPU decodes greedily as transformers does (float32) and keeps its
tokens per request under batching (int8, int4).

The Triton kernel's tiling, K splits and masks also run without a GPU, under Triton's CPU interpreter
(``TRITON_INTERPRET=1``, float32 products).  The CUDA tests run on a machine with a GPU (sm80 or newer)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from loom.runtime.quantization import Int4Linear, Int8Linear, quantize_int8
from tests.runtime.helpers import (
    assert_pool_idle,
    greedy,
    hf_greedy,
    hf_greedy_many,
    make_engine,
    random_prompts,
    run_to_completion,
)

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SHAPES = [(1, 100, 200), (7, 192, 576), (33, 64, 130), (63, 130, 1000), (150, 96, 256)]
# Run in a process of its own: TRITON_INTERPRET is read when Triton is first imported, and the interpreter
# patches triton.language for the whole process (later real compiles there failed).
_INTERPRETED = textwrap.dedent("""
    import json, sys, torch
    from loom.runtime.kernels.cuda_int8_linear import w8a16_linear
    from loom.runtime.quantization import quantize_int8
    out = {}
    for m, n, k in json.loads(sys.argv[1]):
        torch.manual_seed(0)
        q, scales = quantize_int8(torch.randn(n, k))
        x = torch.randn(m, k)
        y = w8a16_linear(x, q, scales.to(torch.bfloat16))
        ref = (x @ q.float().T) * scales.to(torch.bfloat16).float()
        out[f"{m}-{n}-{k}"] = [list(y.shape), str(y.dtype), ((y - ref).norm() / ref.norm()).item()]
    try:
        w8a16_linear(torch.randn(3, 32), *quantize_int8(torch.randn(64, 64)))
    except ValueError as exc:
        out["refusal"] = str(exc)
    print(json.dumps(out))
""")


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """The int8 kernel run under Triton's CPU interpreter on :data:`SHAPES` (one process for all of them)."""
    proc = subprocess.run([sys.executable, "-P", "-c", _INTERPRETED, json.dumps(SHAPES)], capture_output=True,
                          text=True, timeout=300, check=False, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@needs_triton
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_int8_triton_kernel_tiles_splits_and_masks_compute_x_times_q_times_scales(interpreted, m, n, k):
    # ragged N and K (masks), several K splits (4 "multiprocessors" under the interpreter), 1 to 150 rows
    shape, dtype, rel = interpreted[f"{m}-{n}-{k}"]
    assert shape == [m, n] and dtype == "torch.float32"
    assert rel < 1e-5


def test_int8_triton_kernel_splits_k_only_while_tiles_leave_programs_idle():
    from loom.runtime.kernels.cuda_int8_linear import BLOCK_K, split_k

    assert split_k(1536, 8960, 1, 264) < 8960  # batch 1 down_proj: 24 column tiles, K split ~11 ways
    assert split_k(151936, 1536, 1, 264) >= 1536  # the head: 2,374 column tiles, no split
    assert split_k(1536, 8960, 16, 264) >= 8960 - BLOCK_K  # a 1,000-token prefill: 384 tiles, no split


@needs_triton
def test_int8_triton_kernel_refuses_a_weight_of_another_width(interpreted):
    assert "against weight" in interpreted["refusal"]


@needs_cuda
@pytest.mark.parametrize("rows", [1, 5, 63, 64, 300])
def test_int8_linear_on_cuda_computes_its_cpu_grid(rows):
    torch.manual_seed(0)
    w, b, x = torch.randn(1536, 896) * 0.05, torch.randn(1536), torch.randn(rows, 896)
    layer = Int8Linear.from_float(w, b)
    expected = x @ layer.dequantize().T + b
    layer = layer.to("cuda")
    for dtype in (torch.float32, torch.bfloat16):
        y = layer(x.to("cuda", dtype))
        assert y.dtype == dtype and y.device.type == "cuda"
        assert _rel(y.cpu(), expected) < 1e-2  # bfloat16 activations (and output, for bfloat16)


@needs_cuda
@pytest.mark.parametrize("rows", [1, 5, 64, 300])
@pytest.mark.parametrize(("n", "k", "group"), [(1536, 896, 32), (896, 4864, 128), (192, 576, 64), (256, 2080, 32)])
def test_int4_linear_in_tinygemm_layout_computes_its_cpu_grid(rows, n, k, group):
    from loom.runtime.quantization import use_cuda_layouts

    torch.manual_seed(0)
    w, x = torch.randn(n, k) * 0.05, torch.randn(rows, k)
    layer = Int4Linear.from_float(w, None, group)
    weight = layer.dequantize()  # float32, the CPU grid
    model = use_cuda_layouts(torch.nn.Sequential(layer), torch.device("cuda"))
    assert layer.tinygemm and layer.packed.is_cuda
    assert _rel(layer.dequantize().cpu(), weight) < 4e-3  # the same grid, bfloat16-rounded
    y = model(x.to("cuda"))
    assert y.dtype == torch.float32
    assert _rel(y.cpu(), x @ weight.T) < 1e-2


@needs_cuda
def test_int4_from_cpu_kernel_tiles_moves_to_tinygemm_with_the_same_grid():
    from loom.runtime.quantization import use_cuda_layouts

    torch.manual_seed(0)
    layer = Int4Linear.from_float(torch.randn(192, 256) * 0.05, None, 32)
    weight = layer.dequantize()
    if not layer.use_tiles():
        pytest.skip("Loom's CPU int4 kernel is not built here (no AVX-512 VNNI)")
    use_cuda_layouts(torch.nn.Sequential(layer), torch.device("cuda"))
    assert _rel(layer.dequantize().cpu(), weight) < 4e-3


@needs_cuda
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_float32_engine_on_cuda_matches_transformers(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path, device="cuda", dtype="float32")
    prompts = random_prompts(engine.vocab_size, [45, 3, 90, 17], seed=1)
    outs = run_to_completion(engine, [(f"r{i}", p, greedy(16)) for i, p in enumerate(prompts)])
    assert outs["r0"].token_ids == hf_greedy(path, prompts[0], 16)
    refs = hf_greedy_many(path, prompts, [16] * len(prompts))
    assert [outs[f"r{i}"].token_ids for i in range(len(prompts))] == refs
    assert_pool_idle(engine)


@needs_cuda
@pytest.mark.parametrize("method", ["int8", "int4"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantized_engine_on_cuda_decodes_each_request_as_it_does_alone(tiny_checkpoint, method, dtype):
    path = tiny_checkpoint("qwen3")
    engine = make_engine(path, device="cuda", dtype=dtype, quantization=method)
    assert not [m for m in engine.runner.model.modules() if isinstance(m, torch.nn.Linear)]
    prompts = random_prompts(engine.vocab_size, [40, 5, 77, 12, 30, 64], seed=2)
    alone = run_to_completion(engine, [("a", prompts[0], greedy(12))])["a"].token_ids
    outs = run_to_completion(engine, [(f"r{i}", p, greedy(12)) for i, p in enumerate(prompts)])
    assert len(alone) == 12 and outs["r0"].token_ids == alone
    assert_pool_idle(engine)
