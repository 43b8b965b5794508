"""Loom's int8 decode kernel (``torch.ops.loom.int8_linear``) against the product of the dequantized weight
and the activations it reads (float32, or rounded to blocks of int8 codes: Q8_0 where the CPU has VNNI, 7-bit
codes with AVX2 alone), on the LM head's shape and odd sizes, and within 1% (Q8_0) or 2% (7-bit) of the
float32 product; a row's result is the same alone or in a batch;
``Int8Linear`` sends decode rows of every layer to it and keeps PyTorch's kernel without a build; bad input
is a ``RuntimeError``, not a crash."""

from __future__ import annotations

import shutil

import pytest
import torch

from loom.runtime.kernels import cpu_int8_linear, int8_linear_activation_max_code, int8_linear_quantizes_activations
from loom.runtime.quantization.int8 import Int8Linear
from tests.runtime.helpers import q8_0_rows

kernel = cpu_int8_linear() if shutil.which("c++") else None
pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler: the CPU kernels cannot be built")
HEAD = (49152, 576)  # SmolLM2's LM head: 27 MiB of int8


def _layer(n: int, k: int, seed: int = 0) -> tuple[Int8Linear, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    layer = Int8Linear.from_float(torch.randn(n, k, generator=gen) * 0.05, None)
    return layer, layer.qweight.float() * layer.scales.float()[:, None]


def _rows(m: int, k: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed))


def _expected(x: torch.Tensor, weight: torch.Tensor, q8_0: bool = False) -> torch.Tensor:
    """The product as the kernel computes it: on the activations rounded to its codes where it rounds them."""
    max_code = int8_linear_activation_max_code(x.shape[1], q8_0)
    read = x if max_code is None else q8_0_rows(x, max_code)
    return (read.double() @ weight.double().T).float()


def test_the_kernel_builds_where_a_compiler_exists():
    assert kernel is not None, "cpu_int8_linear() returned None: the build failed (see the log)"


@pytest.mark.parametrize(("n", "k"), [HEAD, (1536, 576), (576, 1536), (7, 128), (7, 13), (300, 1)])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("q8_0", [False, True])
def test_rows_equal_the_product_of_the_dequantized_weight_and_the_activations_it_reads(n, k, m, q8_0):
    layer, weight = _layer(n, k)
    x = _rows(m, k)
    out = kernel(x, layer.qweight, layer.scales, q8_0=q8_0)
    assert out.shape == (m, n) and out.dtype == torch.float32
    torch.testing.assert_close(out, _expected(x, weight, q8_0), rtol=1e-5, atol=1e-4)  # exact products, float32 sums
    exact = x @ weight.T
    bound = {None: 1e-5, 127: 0.01, 63: 0.02}[int8_linear_activation_max_code(k, q8_0)]  # Gaussian rows: 0.5% / 1.1%
    assert ((out - exact).norm() / exact.norm()).item() < bound


def test_a_layer_asking_for_q8_0_activations_gets_them_on_every_cpu():
    layer, weight = _layer(*HEAD)
    x = _rows(2, HEAD[1])
    layer.q8_0_activations = True  # as the LM head's
    torch.testing.assert_close(layer(x), _expected(x, weight, q8_0=True), rtol=1e-5, atol=1e-4)
    assert int8_linear_activation_max_code(HEAD[1], q8_0=True) in (127, None)  # None: no integer dot product


@pytest.mark.parametrize("k", [576, 96])
def test_int8_linear_quantizes_activations_says_which_numerics_the_kernel_has(k):
    layer, weight = _layer(256, k)
    x = _rows(2, k)
    out = kernel(x, layer.qweight, layer.scales)
    float32_sums = torch.allclose(out, x @ weight.T, rtol=1e-5, atol=1e-5)
    assert float32_sums is not int8_linear_quantizes_activations(k)  # 96: not a multiple of 64, the float32 loop


def test_a_rows_result_does_not_depend_on_the_rows_decoded_beside_it():
    layer, _ = _layer(*HEAD)
    x = _rows(8, HEAD[1])
    batch = layer(x)
    for i in range(8):
        assert torch.equal(layer(x[i:i + 1]), batch[i:i + 1]), i  # bit for bit


def test_decode_rows_of_every_layer_take_the_kernel_and_pytorchs_without_a_build(monkeypatch):
    from loom.runtime.quantization import int8 as int8_module

    for shape in (HEAD, (256, 576)):
        layer, weight = _layer(*shape)
        x = _rows(2, shape[1])
        torch.testing.assert_close(layer(x), _expected(x, weight), rtol=1e-5, atol=1e-4)  # the kernel's numerics
    monkeypatch.setattr(int8_module, "_decode_kernel", lambda: None)  # as without a compiler
    small, small_weight = _layer(256, 576)
    x = _rows(1, 576)
    out = small(x)
    assert not torch.allclose(out, x @ small_weight.T, rtol=1e-5, atol=1e-5)  # bfloat16 activations
    torch.testing.assert_close(out, x @ small_weight.T, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bad", ["dtype", "k", "scale"])
def test_bad_input_is_a_runtime_error_naming_the_argument(bad):
    layer, _ = _layer(64, 32)
    x = {"dtype": torch.randn(1, 32, dtype=torch.float64), "k": torch.randn(1, 31)}.get(bad, torch.randn(1, 32))
    scale = layer.scales.float() if bad == "scale" else layer.scales
    with pytest.raises(RuntimeError, match="int8_linear: "):
        kernel(x, layer.qweight, scale)
