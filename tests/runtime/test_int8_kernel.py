"""Loom's batch-1 int8 kernel (``torch.ops.loom.int8_linear``) against the float32 product of the dequantized
weight, on the LM head's shape and odd sizes; ``Int8Linear`` sends one float32 row to it and more rows to
PyTorch's kernel; bad input is a ``RuntimeError``, not a crash."""

from __future__ import annotations

import shutil

import pytest
import torch

from loom.runtime.kernels import cpu_int8_linear
from loom.runtime.quantization.int8 import Int8Linear

kernel = cpu_int8_linear() if shutil.which("c++") else None
pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler: the CPU kernels cannot be built")


def _layer(n: int, k: int, seed: int = 0) -> tuple[Int8Linear, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    layer = Int8Linear.from_float(torch.randn(n, k, generator=gen) * 0.05, None)
    return layer, layer.qweight.float() * layer.scales.float()[:, None]


def test_the_kernel_builds_where_a_compiler_exists():
    assert kernel is not None, "cpu_int8_linear() returned None: the build failed (see the log)"


@pytest.mark.parametrize(("n", "k"), [(49152, 576), (1536, 576), (576, 1536), (7, 13), (300, 1)])
def test_one_row_equals_the_float32_product_of_the_dequantized_weight(n, k):
    layer, weight = _layer(n, k)
    x = torch.randn(1, k, generator=torch.Generator().manual_seed(1))
    ref = x @ weight.T
    out = kernel(x, layer.qweight, layer.scales)
    assert out.shape == (1, n) and out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)  # float32 sums: no bfloat16 rounding of x
    torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)  # the layer's batch-1 path is the kernel


def test_more_rows_take_pytorchs_kernel_within_bfloat16_rounding():
    layer, weight = _layer(256, 576)
    x = torch.randn(4, 576, generator=torch.Generator().manual_seed(2))
    out = layer(x)
    assert not torch.allclose(out, x @ weight.T, rtol=1e-5, atol=1e-5)  # bfloat16 activations: not the kernel
    torch.testing.assert_close(out, x @ weight.T, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bad", ["rows", "dtype", "k"])
def test_bad_input_is_a_runtime_error_naming_the_argument(bad):
    layer, _ = _layer(64, 32)
    x = {"rows": torch.randn(2, 32), "dtype": torch.randn(1, 32, dtype=torch.float64), "k": torch.randn(1, 31)}[bad]
    with pytest.raises(RuntimeError, match="int8_linear: "):
        kernel(x, layer.qweight, layer.scales)
