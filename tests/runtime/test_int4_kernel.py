"""Loom's int4 decode kernel (``torch.ops.loom.int4_linear``) and its tile layout: the layout holds the same
codes, scales and zero points as PyTorch's (so the same weight) in fewer bytes (8-bit scale and zero codes under
shared exponents); weights whose scales are off that grid keep PyTorch's kernel; the kernel equals the product of that weight
and the Q8_0-rounded activations, within 1% of the float32 product; a row's result is the same alone or in a
batch; bfloat16 in gives bfloat16 out; the engine's int4 layers take it; bad input is a ``RuntimeError``."""

from __future__ import annotations

import shutil
import statistics

import pytest
import torch

from loom.runtime import SamplingParams
from loom.runtime.kernels import cpu_int4_linear
from loom.runtime.quantization import use_cpu_kernel_layouts
from loom.runtime.quantization.int4 import (ZERO_CODE_MAX, Int4Linear, block_exponents, from_tiles, to_tiles,
                                            unpack_codes)
from tests.runtime.helpers import make_engine, q8_0_rows, random_prompts, run_to_completion

kernel = cpu_int4_linear() if shutil.which("c++") else None
pytestmark = pytest.mark.skipif(kernel is None, reason="no C++ compiler or no AVX-512 VNNI: PyTorch's int4 kernel")


def _layer(n: int, k: int, group: int, seed: int = 0) -> Int4Linear:
    gen = torch.Generator().manual_seed(seed)
    return Int4Linear.from_float(torch.randn(n, k, generator=gen) * 0.05, None, group)


def _rows(m: int, k: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("n", "k", "group"), [(128, 576, 32), (192, 1536, 64), (64, 256, 128)])
def test_the_tile_layout_holds_the_same_codes_scales_and_zeros(n, k, group):
    layer = _layer(n, k, group)
    codes, weight = unpack_codes(layer.packed, n, k), layer.dequantize()
    tiles, scales_zeros, exponents = to_tiles(codes, layer.scales_and_zeros)
    back_codes, back_scales_zeros = from_tiles(tiles, scales_zeros, exponents)
    assert torch.equal(back_codes, codes) and torch.equal(back_scales_zeros, layer.scales_and_zeros)
    assert layer.use_tiles() and layer.use_tiles()  # a second call keeps it
    assert layer.packed.numel() == 0  # one layout held, not two
    assert torch.equal(layer.dequantize(), weight)  # the prefill GEMM's weight, unchanged


def test_the_tiles_hold_a_group_32_layer_in_4_56_bits_a_weight():
    layer = _layer(128, 1536, 32)
    before = layer.scales_and_zeros.numel() * 2
    assert layer.use_tiles()
    held = sum(t.numel() * t.element_size() for t in (layer.tiles, layer.tile_scales_zeros, layer.tile_exponents))
    assert held * 8 / (128 * 1536) == 4 + 16 / 32 + 16 / 256
    assert layer.tile_scales_zeros.numel() + layer.tile_exponents.numel() < before / 1.7  # bfloat16: 32 bits a group


def test_a_layer_whose_scales_are_off_the_block_grid_keeps_pytorchs_kernel_and_its_weight():
    layer = _layer(128, 256, 32)
    weight = layer.dequantize()
    zeros = layer.scales_and_zeros[..., 1].t().float()  # [N, G]
    step = 2.0 ** block_exponents(zeros, ZERO_CODE_MAX)[0, 0].item()
    layer.scales_and_zeros[0, 0, 1] = zeros[0, 0] + step / 2  # half a zero code: exact in bfloat16, off the grid
    assert not layer.use_tiles()
    assert layer.tiles is None and layer.packed.numel() > 0
    x = _rows(1, 256)
    exact = x @ layer.dequantize().T
    assert ((layer(x) - exact).norm() / exact.norm()).item() < 0.01
    assert not torch.equal(layer.dequantize(), weight)  # the changed scale is what it computes with


@pytest.mark.parametrize(("n", "k", "group"), [(128, 576, 32), (192, 1536, 64), (64, 256, 128), (1152, 896, 32)])
@pytest.mark.parametrize("m", [1, 3])
def test_rows_equal_the_dequantized_weight_times_the_q8_0_activations(n, k, group, m):
    layer = _layer(n, k, group)
    weight = layer.dequantize()
    assert layer.use_tiles()
    x = _rows(m, k)
    out = layer.tile_matmul(x)
    assert out.shape == (m, n) and out.dtype == torch.float32
    torch.testing.assert_close(out, (q8_0_rows(x).double() @ weight.double().T).float(), rtol=1e-5, atol=1e-4)
    exact = x @ weight.T
    assert ((out - exact).norm() / exact.norm()).item() < 0.01  # the activation rounding: ~0.5%


def test_bfloat16_rows_give_bfloat16_outputs_of_the_same_sums():
    layer = _layer(128, 576, 32)
    assert layer.use_tiles()
    x = _rows(2, 576).bfloat16()
    out = layer.tile_matmul(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, layer.tile_matmul(x.float()).bfloat16())


def test_a_rows_result_does_not_depend_on_the_rows_decoded_beside_it():
    layer = _layer(1152, 896, 32)
    assert layer.use_tiles()
    x = _rows(8, 896)
    batch = layer.tile_matmul(x)
    for i in range(8):
        assert torch.equal(layer.tile_matmul(x[i:i + 1]), batch[i:i + 1]), i  # bit for bit


def test_the_engine_moves_every_int4_layer_to_the_kernel_and_agrees_with_pytorchs(arch_checkpoint, monkeypatch,
                                                                                  tmp_path):
    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    path = arch_checkpoint("qwen2")
    prompts = random_prompts(200, [5, 12, 70], seed=3)  # 70 tokens: over 64 rows, PyTorch's side takes the GEMM
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=3)
    engine = make_engine(path, quantization="int4")
    layers = [m for m in engine.runner.model.modules() if isinstance(m, Int4Linear)]
    assert layers and all(m.tiles is not None for m in layers)
    assert use_cpu_kernel_layouts(engine.runner.model) == len(layers)  # already moved: each says so again
    ours = run_to_completion(engine, [(str(i), p, params) for i, p in enumerate(prompts)])
    monkeypatch.setattr("loom.runtime.kernels.cpu_int4_linear", lambda: None)  # as without the kernel: PyTorch's
    engine = make_engine(path, quantization="int4")
    assert all(m.tiles is None for m in engine.runner.model.modules() if isinstance(m, Int4Linear))
    theirs = run_to_completion(engine, [(str(i), p, params) for i, p in enumerate(prompts)])
    gaps = []
    for i in map(str, range(len(prompts))):
        top, other = ours[i].logprobs[0], theirs[i].logprobs[0]
        gaps += [abs(top[token] - other[token]) for token in top.keys() & other.keys()]
    # the same weights, Q8_0 against bfloat16 activations: close, not equal.  Measured over 8 prompts: median gap
    # 0.009-0.015 nats, largest 0.042-0.056 (depending on the random weights' grid)
    assert gaps and statistics.median(gaps) < 0.02 and max(gaps) < 0.08, gaps


@pytest.mark.parametrize("bad", ["dtype", "k", "tiles", "scales", "exponents"])
def test_bad_input_is_a_runtime_error_naming_the_argument(bad):
    layer = _layer(64, 256, 32)
    assert layer.use_tiles()
    tiles, scales_zeros, exponents = layer.tiles, layer.tile_scales_zeros, layer.tile_exponents
    x = {"dtype": torch.randn(1, 256, dtype=torch.float64), "k": torch.randn(1, 250)}.get(bad, torch.randn(1, 256))
    tiles = tiles[:, :-1].contiguous() if bad == "tiles" else tiles
    scales_zeros = scales_zeros.float() if bad == "scales" else scales_zeros
    exponents = exponents[:, :, :1].contiguous() if bad == "exponents" else exponents
    named = {"dtype": "x", "k": "K", "scales": "scales_zeros"}.get(bad, bad)
    with pytest.raises(RuntimeError, match=f"int4_linear: {named} "):
        kernel(x, tiles, scales_zeros, exponents, 32)
