"""Weight-only int8 / int4 layers against their own dequantized weights, the int4
quantizer against plain min-max, and the engine flag's validation; the real model's
quality bounds are in tests/evals/test_quantization_quality.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from loom.runtime import EngineConfig
from loom.runtime.quantization import Int4Linear, Int8Linear, quantize_int4, quantize_model, quantized_bytes
from loom.runtime.quantization.int8 import QuantizedEmbedding


def _dequant_int4(q, scales, zeros, group):
    n, k = q.shape
    return ((q.float() - 8).view(n, k // group, group) * scales.float()[..., None]
            + zeros.float()[..., None]).view(n, k)


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_int8_linear_computes_x_times_its_dequantized_weight_within_bfloat16_rounding():
    torch.manual_seed(0)
    w, b, x = torch.randn(96, 128) * 0.05, torch.randn(96), torch.randn(5, 128)
    layer = Int8Linear.from_float(w, b)
    assert layer.qweight.dtype == torch.int8 and layer(x).dtype == torch.float32
    assert _rel(layer(x), x @ layer.dequantize().T + b) < 1e-2  # activations go through bfloat16
    assert _rel(layer.dequantize(), w) < 1e-2  # per-channel int8 error of a gaussian matrix


def test_int8_prefill_rows_take_the_prefill_gemm_and_agree_with_the_decode_kernel():
    from loom.runtime.kernels import int8_linear_activation_max_code
    from loom.runtime.quantization.int8 import GEMM_MIN_ROWS

    torch.manual_seed(0)
    w, x = torch.randn(96, 128) * 0.05, torch.randn(GEMM_MIN_ROWS + 3, 128)
    layer = Int8Linear.from_float(w, None)
    decode_rows = torch.cat([layer(x[i:i + 1]) for i in range(x.shape[0])])  # one row at a time: the kernel
    # the kernel's activation codes: ~0.5% error with Q8_0's (VNNI), ~1.1% with AVX2's 7-bit ones
    assert _rel(layer(x), decode_rows) < (2e-2 if int8_linear_activation_max_code(128) == 63 else 1e-2)
    assert _rel(layer(x), x @ layer.dequantize().T) < 1e-2


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_linear_computes_x_times_its_dequantized_weight(group):
    torch.manual_seed(0)
    w, x = torch.randn(64, 256) * 0.05, torch.randn(3, 256)
    q, s, z = quantize_int4(w, group)
    layer = Int4Linear.from_codes(q, s, z, group, None)
    assert _rel(layer(x), x @ _dequant_int4(q, s, z, group).T) < 1e-2


def test_int4_unpacks_the_kernels_layout_to_the_codes_it_was_given():
    from loom.runtime.quantization.int4 import packed_block_rows

    assert packed_block_rows() in (64, 32)  # AVX-512 or AVX2 build; else prefill chunks take the kernel (slower)
    torch.manual_seed(0)
    q, s, z = quantize_int4(torch.randn(192, 256) * 0.05, 64)
    layer = Int4Linear.from_codes(q, s, z, 64, None)
    assert torch.equal(layer.dequantize(), _dequant_int4(q, s, z, 64))  # the grid the kernel computes on
    assert _rel(layer.dequantize(torch.bfloat16).float(), layer.dequantize()) < 4e-3  # one bfloat16 rounding


def test_int4_unpacks_both_of_pytorchs_block_layouts():
    from loom.runtime.quantization.int4 import unpack_codes

    codes = torch.randint(0, 16, (64, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for rows in (64, 32):  # per block of rows, per input: low nibbles the first half of rows, high the second
        blocks = codes.view(64 // rows, rows, 8).transpose(1, 2)  # [blocks, K, rows]
        packed = (blocks[..., :rows // 2] | (blocks[..., rows // 2:] << 4)).reshape(64, 4)
        assert torch.equal(unpack_codes(packed, 64, 8, block_rows=rows), codes), rows


@pytest.mark.parametrize(("flags", "dtype"), [("fma avx2", torch.float32), ("avx2 avx512f avx512_bf16", torch.bfloat16),
                                              ("avx2 amx_bf16", torch.bfloat16), ("avx512f avx512_vnni", torch.float32)])
def test_prefill_gemm_runs_in_bfloat16_only_where_the_cpu_multiplies_it_natively(monkeypatch, flags, dtype):
    from loom.runtime import kernels
    from loom.runtime.quantization import int8

    monkeypatch.setattr(kernels, "_cpu_flags", lambda: f"flags : {flags}")
    int8.prefill_dtype.cache_clear()
    try:
        assert int8.prefill_dtype() == dtype  # emulated bfloat16 GEMMs were 4.8x slower than float32 (AVX2)
    finally:
        int8.prefill_dtype.cache_clear()


def test_int4_prefill_chunk_through_the_prefill_gemm_matches_the_kernel():
    from loom.runtime.quantization.int8 import GEMM_MIN_ROWS

    torch.manual_seed(0)
    w, x, b = torch.randn(128, 256) * 0.05, torch.randn(GEMM_MIN_ROWS + 5, 256), torch.randn(128)
    layer = Int4Linear.from_float(w, b, 32)
    assert layer.gemm_min_rows == GEMM_MIN_ROWS
    kernel = torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), layer.packed, 32,
                                                        layer.scales_and_zeros).float() + b
    assert _rel(layer(x), kernel) < 1e-2  # bfloat16 activations both ways
    assert _rel(layer(x), x @ layer.dequantize().T + b) < 1e-2


def test_int4_reproduces_weights_already_on_a_4bit_grid_up_to_its_scales_8_bit_codes():
    torch.manual_seed(0)
    codes = torch.randint(0, 16, (64, 128)).float()
    codes[:, ::32], codes[:, 1::32] = 0, 15  # every group spans the whole grid, as a Q4_1 block does
    step = (torch.rand(64, 4) * 0.01 + 0.001).repeat_interleave(32, 1)
    low = (-torch.rand(64, 4) * 0.05).repeat_interleave(32, 1)
    w = codes * step + low
    q, s, z = quantize_int4(w, 32)
    assert torch.equal(q.float(), codes)
    assert _rel(_dequant_int4(q, s, z, 32), w) < 0.02  # 8-bit scale and zero codes, nothing else


def test_int4_clipping_search_is_never_worse_than_min_max_on_the_same_grid():
    from loom.runtime.quantization.int4 import SCALE_CODE_MAX, ZERO_CODE_MAX, block_exponents, snap_to_block_grid

    torch.manual_seed(0)
    w = torch.randn(128, 256) * 0.05
    w[0, 3] = 1.0  # an outlier that min-max would spend the whole grid on
    q, s, z = quantize_int4(w, 32)
    g = w.view(128, 8, 32)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = (hi - lo) / 15
    zero_exp = block_exponents(lo + 8 * scale, ZERO_CODE_MAX)
    scale = snap_to_block_grid(scale, block_exponents(scale, SCALE_CODE_MAX), 1, SCALE_CODE_MAX)[1]
    zero = snap_to_block_grid(lo + 8 * scale, zero_exp, -ZERO_CODE_MAX, ZERO_CODE_MAX)[1]
    mm_codes = torch.round((g - zero[..., None]) / scale[..., None] + 8).clamp(0, 15)
    min_max = ((mm_codes - 8) * scale[..., None] + zero[..., None]).view(128, 256)
    err = (_dequant_int4(q, s, z, 32) - w).pow(2).view(128, 8, 32).sum(-1)
    assert (err <= (min_max - w).pow(2).view(128, 8, 32).sum(-1) + 1e-9).all()
    assert err.sum() < (min_max - w).pow(2).sum()


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_quantized_random_model_keeps_no_float_linear_and_shrinks_its_weights(method, tiny_checkpoint):
    from loom.runtime.models.loader import load_hf_config, load_model

    path = tiny_checkpoint("qwen3")
    cfg = load_hf_config(path)
    model = load_model(path, cfg, dtype=torch.float32, device=torch.device("cpu"))
    before = quantized_bytes(model)
    quantize_model(model, method, 32)
    assert not [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert isinstance(model.model.embed_tokens, QuantizedEmbedding)
    assert quantized_bytes(model) < before / (3 if method == "int8" else 3.5)
    int8_layers = [m for m in model.modules() if isinstance(m, Int8Linear)]  # the head, and every layer under int8
    assert [m.q8_0_activations for m in int8_layers] == [m is model.lm_head for m in int8_layers]  # logits: Q8_0


def test_quantized_embedding_rows_are_the_dequantized_int8_rows():
    torch.manual_seed(0)
    w = torch.randn(50, 16)
    from loom.runtime.quantization import quantize_int8

    q, s = quantize_int8(w)
    emb = QuantizedEmbedding(q, s, torch.float32)
    ids = torch.tensor([3, 0, 49, 3])
    assert torch.allclose(emb(ids), q[ids].float() * s[ids, None])
    assert _rel(emb(ids), w[ids]) < 1e-2


@pytest.mark.parametrize(("field", "value"), [("quantization", "fp8"), ("quantization_group_size", 48)])
def test_bad_quantization_settings_are_value_errors_naming_the_field(field, value):
    args = {"quantization": "int4", field: value}
    with pytest.raises(ValueError, match=f"^{field}:"):
        EngineConfig(model="m", **args)


def test_quantization_with_tensor_parallelism_is_refused_at_config_time():
    with pytest.raises(ValueError, match="^quantization:.*tensor_parallel_size"):
        EngineConfig(model="m", quantization="int8", tensor_parallel_size=2)


def test_an_unknown_method_given_to_the_loader_is_a_value_error_and_makes_no_cache_folder(tiny_checkpoint, tmp_path,
                                                                                         monkeypatch):
    from loom.runtime.models.loader import load_hf_config, load_model

    monkeypatch.setenv("LOOM_CACHE", str(tmp_path / "cache"))
    path = tiny_checkpoint("qwen2")
    with pytest.raises(ValueError, match="quantization: must be one of"):  # it used to load as int4
        load_model(path, load_hf_config(path), dtype=torch.float32, device=torch.device("cpu"), quantization="/tmp/x")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_a_cached_quantized_load_equals_the_first_and_builds_no_float_model(method, tiny_checkpoint, tmp_path,
                                                                          monkeypatch):
    from loom.runtime.models.llama import LlamaForCausalLM
    from loom.runtime.models.loader import load_hf_config, load_model
    from loom.runtime.quantization.cache import WEIGHTS, cache_dir

    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    path = tiny_checkpoint("qwen2")  # q/k/v biases, tied embeddings
    cfg = load_hf_config(path)
    first = load_model(path, cfg, dtype=torch.float32, device=torch.device("cpu"), quantization=method)
    assert (cache_dir(path, method, 32, torch.float32) / WEIGHTS).is_file()
    built = []
    monkeypatch.setattr(LlamaForCausalLM, "__init__", _recording_init(LlamaForCausalLM.__init__, built))
    second = load_model(path, cfg, dtype=torch.float32, device=torch.device("cpu"), quantization=method)
    assert built == ["meta"]  # the cached load allocated no float weights
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    tensors = list(second.parameters()) + list(second.buffers())
    assert all(t.device.type == "cpu" for t in tensors)
    assert all(t.data_ptr() % 64 == 0 for t in tensors)  # the int8 kernel crashes on unaligned weights
    x = torch.randn(64, cfg.hidden_size)
    layer = second.model.decoder_layers[0].self_attn.qkv_proj
    assert torch.equal(layer(x), first.model.decoder_layers[0].self_attn.qkv_proj(x))
    if getattr(cfg, "tie_word_embeddings", False):
        assert second.lm_head.qweight.data_ptr() == second.model.embed_tokens.qweight.data_ptr()
    assert second.lm_head.q8_0_activations  # the cached load's head keeps Q8_0 activation codes too
    rope_a, rope_b = first.model.decoder_layers[0].self_attn.rope, second.model.decoder_layers[0].self_attn.rope
    assert torch.equal(rope_a.cos, rope_b.cos) and torch.equal(rope_a.sin, rope_b.sin)  # real tables, not meta


def _recording_init(init, built):
    def record(self, *args, **kwargs):
        built.append(torch.empty(0).device.type)
        init(self, *args, **kwargs)
    return record


@pytest.mark.parametrize(("model", "device", "dtype", "expected"), [
    ("smollm2-135m-instruct", "cpu", torch.float32, "int4"),
    ("qwen2.5-coder-0.5b-instruct", "cpu", torch.float32, "int8"),
    ("/some/checkpoint/folder", "cpu", torch.float32, None),   # a folder loads as is: the float reference
    ("smollm2-135m-instruct", "cuda", torch.float32, None),    # a GPU user asks for int8/int4 by name
    ("smollm2-135m-instruct", "cpu", torch.bfloat16, None),
])
def test_auto_quantization_is_the_registered_models_own_format_on_cpu_only(model, device, dtype, expected):
    config = EngineConfig(model=model)
    assert config.resolve_quantization(torch.device(device), dtype) == expected
    assert config.quantization == expected


@pytest.mark.parametrize(("k", "group"), [(576, 32), (256, 64), (1536, 128)])
def test_int4_scales_and_zeros_are_8_bit_codes_under_an_exponent_shared_by_eight_groups(k, group):
    from loom.runtime.quantization.int4 import EXPONENT_GROUPS

    torch.manual_seed(0)
    w = torch.randn(32, k) * torch.logspace(-3, 0, 32)[:, None]  # rows of very different magnitudes
    _, s, z = quantize_int4(w, group)
    for values, lowest, highest in ((s.float(), 1, 255), (z.float(), -127, 127)):
        for block in values.split(EXPONENT_GROUPS, dim=1):  # [32, <= 8]: one exponent per row
            mantissa, e = torch.frexp(block.abs().amax(1, keepdim=True) / highest)
            e = torch.where(mantissa == 0.5, e - 1, e)  # the least e with max |value| / 2**e <= highest
            codes = block / torch.ldexp(torch.ones(()), e.float())
            assert torch.equal(codes, codes.round()), "a scale or zero is not an integer times its block's 2**e"
            assert codes.min() >= lowest and codes.max() <= highest


def test_int8_prefill_scratch_first_filled_under_inference_mode_serves_calls_outside_it():
    from loom.runtime.quantization import int8

    torch.manual_seed(0)
    layer = Int8Linear.from_float(torch.randn(96, 128) * 0.05, None)
    x = torch.randn(int8.GEMM_MIN_ROWS, 128)
    int8._scratch.buffer = None  # this thread's buffer: made by the first call below
    with torch.inference_mode():
        inside = layer(x)  # the engine's steps run under inference_mode
    assert torch.equal(layer(x), inside)  # an in-place write to an inference tensor would raise here


def test_the_int4_cache_stores_the_tile_layout_and_a_process_without_the_kernel_packs_it_back(tiny_checkpoint, tmp_path,
                                                                                              monkeypatch):
    import json

    from loom.runtime import kernels
    from loom.runtime.models.loader import load_hf_config, load_model
    from loom.runtime.quantization.cache import WEIGHTS, cache_dir

    if kernels.cpu_int4_linear() is None:
        pytest.skip("Loom's int4 kernel is not built here (no C++ compiler): the cache keeps PyTorch's layout")
    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    path = tiny_checkpoint("qwen2")
    cfg = load_hf_config(path)
    tiled = load_model(path, cfg, dtype=torch.float32, device=torch.device("cpu"), quantization="int4")
    file = cache_dir(path, "int4", 32, torch.float32) / WEIGHTS
    with open(file, "rb") as f:
        stored = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    name = "model.layers.0.self_attn.qkv_proj"
    assert stored[f"{name}.tiles"]["shape"][0] > 0 and stored[f"{name}.packed"]["shape"] == [0]  # read, not made

    monkeypatch.setattr(kernels, "cpu_int4_linear", lambda: None)
    packed = load_model(path, cfg, dtype=torch.float32, device=torch.device("cpu"), quantization="int4")
    layers = [(a, b) for a, b in zip(tiled.modules(), packed.modules()) if isinstance(a, Int4Linear)]
    assert layers and all(a.tiles is not None and b.tiles is None and b.packed.numel() > 0 for a, b in layers)
    assert all(torch.equal(a.dequantize(), b.dequantize()) for a, b in layers)  # the same weights in both layouts
    x = torch.randn(3, cfg.hidden_size)
    a, b = layers[0]
    assert torch.allclose(a(x), b(x), rtol=0.02, atol=0.02)  # Loom's kernel rounds x to 8 bits, PyTorch's to bfloat16
