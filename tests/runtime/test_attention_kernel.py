"""Loom's compiled CPU paged-attention kernel against the gather + SDPA reference path.

Random caches, random (non-contiguous) block tables and batches that mix
decodes with short query chunks over a cached context, for GQA, MQA and MHA,
head_dim 64 / 80 / 128, block sizes 16 and 256, with and without a sliding
window.  Engine-level equality with transformers under the kernel is the
existing suite (``test_engine_matches_transformers``: the kernel is the CPU
default); ``test_reference_backend_still_matches_transformers`` keeps the
reference honest.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from loom.runtime.attention import AttentionMetadata, DecodeGroup, PagedAttention, PrefillSeq
from loom.runtime.kernels import KERNEL_MAX_QUERY_LEN, cpu_paged_attention
from tests.runtime.helpers import greedy, hf_greedy_many, make_engine, random_prompts, run_to_completion

# Skipped only where it truly cannot be built (no C++ compiler); with a compiler, a kernel that
# stops compiling fails here instead of letting the engine fall back to the reference unnoticed.
HAS_COMPILER = shutil.which(os.environ.get("CXX", "c++")) is not None
kernel = cpu_paged_attention() if HAS_COMPILER else None
pytestmark = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the CPU kernel cannot be built")


def test_the_kernel_builds_where_a_compiler_exists():
    assert kernel is not None, "cpu_paged_attention() returned None: the build failed (see the log)"

SHAPES = [(8, 2, 64), (8, 1, 80), (4, 4, 128), (6, 3, 80)]  # (query heads, KV heads, head_dim): GQA, MQA, MHA


def _case(hq, hkv, d, block_size, q_lens, ctx_lens, seed):
    gen = torch.Generator().manual_seed(seed)
    nblk = [-(-c // block_size) for c in ctx_lens]
    num_blocks = sum(nblk) + 3
    k_cache = torch.randn(num_blocks * block_size, hkv, d, generator=gen)
    v_cache = torch.randn(num_blocks * block_size, hkv, d, generator=gen)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, at = [], 0
    for n in nblk:
        tables.append(perm[at:at + n])
        at += n
    q = torch.randn(sum(q_lens), hq, d, generator=gen)
    return q, k_cache, v_cache, tables


def _reference(att, q, tables, q_lens, ctx_lens, block_size):
    """Each request through the reference path: decodes as decode groups, the rest as prefill chunks."""
    out = torch.empty_like(q)
    width = max(len(t) for t in tables)
    ws_rows = sum(width for _ in tables)
    ws = tuple(torch.empty(ws_rows, block_size * att.num_kv_heads * att.head_dim) for _ in range(2))
    start = 0
    for table, n, ctx in zip(tables, q_lens, ctx_lens):
        meta = AttentionMetadata(slot_mapping=torch.empty(0, dtype=torch.long), block_size=block_size, workspace=ws)
        ids = torch.tensor(table, dtype=torch.long)
        if n == 1:
            meta.decode_groups = [DecodeGroup(0, 1, ids, len(table), torch.tensor([ctx]))]
            out[start:start + 1] = att._decode(q[start:start + 1], meta, 0)
        else:
            meta.prefills = [PrefillSeq(0, n, ctx, ids)]
            out[start:start + n] = att._prefill(q[start:start + n], None, None, meta, 0)
        start += n
    return out


def _run_kernel(att, q, tables, q_lens, ctx_lens, block_size):
    width = max(len(t) for t in tables)
    counts = torch.tensor(q_lens, dtype=torch.int32)
    args = (
        torch.cumsum(counts, 0, dtype=torch.int32) - counts,
        counts,
        torch.tensor(ctx_lens, dtype=torch.int32),
        torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
    )
    return kernel(q, att.k_cache, att.v_cache, *args, block_size, att.scale, att.sliding_window or 0)


@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("window", [None, 24])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"hq{s[0]}-hkv{s[1]}-d{s[2]}")
def test_kernel_equals_gather_reference_within_float32_tolerance(shape, window, block_size):
    hq, hkv, d = shape
    q_lens = [1, 1, 3, KERNEL_MAX_QUERY_LEN, 1, 7, 1]
    ctx_lens = [1, 17, 40, 300, block_size, block_size + 1, 2 * block_size + 5]
    q, k_cache, v_cache, tables = _case(hq, hkv, d, block_size, q_lens, ctx_lens, seed=hq * d + block_size)
    att = PagedAttention(hq, hkv, d, d**-0.5, sliding_window=window)
    att.k_cache, att.v_cache = k_cache, v_cache
    got = _run_kernel(att, q, tables, q_lens, ctx_lens, block_size)
    want = _reference(att, q, tables, q_lens, ctx_lens, block_size)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"hq{s[0]}-hkv{s[1]}-d{s[2]}")
def test_kernel_equals_reference_on_chunks_longer_than_the_engine_sends_it(shape, block_size):
    """The transposed-key (GEMM-style) path over many query tiles, windowed and not: the engine routes
    chunks over ``KERNEL_MAX_QUERY_LEN`` to the reference path for speed, not because the kernel is wrong."""
    hq, hkv, d = shape
    q_lens, ctx_lens = [40, 1, 100], [300, 50, 400]
    q, k_cache, v_cache, tables = _case(hq, hkv, d, block_size, q_lens, ctx_lens, seed=hq + d)
    for window in (None, 70):
        att = PagedAttention(hq, hkv, d, d**-0.5, sliding_window=window)
        att.k_cache, att.v_cache = k_cache, v_cache
        got = _run_kernel(att, q, tables, q_lens, ctx_lens, block_size)
        torch.testing.assert_close(got, _reference(att, q, tables, q_lens, ctx_lens, block_size),
                                   rtol=1e-5, atol=1e-5)


def test_kernel_uses_every_thread_for_a_single_decode_and_matches():
    """Batch 1 splits the KV heads across threads; the answer must not depend on the split."""
    q_lens, ctx_lens = [1], [1000]
    q, k_cache, v_cache, tables = _case(8, 4, 64, 16, q_lens, ctx_lens, seed=3)
    att = PagedAttention(8, 4, 64, 0.125)
    att.k_cache, att.v_cache = k_cache, v_cache
    want = _reference(att, q, tables, q_lens, ctx_lens, 16)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.testing.assert_close(_run_kernel(att, q, tables, q_lens, ctx_lens, 16), want, rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("arch", ["qwen3", "mistral"])
def test_reference_backend_still_matches_transformers(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    prompts = random_prompts(4096, [5, 40, 90, 17], seed=11)
    outs = {}
    for backend in ("torch_sdpa", "cpu_paged"):
        engine = make_engine(path, attention_backend=backend)
        assert engine.runner.attention_backend == backend
        final = run_to_completion(engine, [(str(i), p, greedy(12)) for i, p in enumerate(prompts)])
        outs[backend] = [final[str(i)].token_ids for i in range(len(prompts))]
    assert outs["torch_sdpa"] == outs["cpu_paged"] == hf_greedy_many(path, prompts, [12] * len(prompts))


def test_a_build_that_appends_to_its_flag_lists_leaves_the_build_name_unchanged(monkeypatch, tmp_path):
    """torch's ``load`` appends its own flags to the lists it is given (seen: ``-lc10 -ltorch ...``
    on ``extra_ldflags``); that once changed the build name so every engine rebuilt the kernel."""
    import torch.utils.cpp_extension as cpp_extension

    from loom.runtime import kernels

    def appending_load(name, sources, extra_cflags, extra_ldflags, build_directory, verbose, is_python_module):
        extra_cflags.append("-DAPPENDED")
        extra_ldflags.append("-ltorch")
        (Path(build_directory) / f"{name}.so").write_bytes(b"")  # the operator is registered already

    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", appending_load)
    monkeypatch.setattr(kernels, "_loaded", {})
    kernels._build_name.cache_clear()
    name = kernels._build_name()
    assert kernels.cpu_paged_attention() is kernel
    kernels._build_name.cache_clear()
    assert kernels._build_name() == name
    assert (tmp_path / "torch_extensions" / name / f"{name}.so").is_file()


def test_without_a_compiler_the_engine_says_so_and_uses_the_reference(tiny_checkpoint, monkeypatch, tmp_path, caplog):
    from loom.runtime import kernels

    monkeypatch.setenv("LOOM_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "/bin/false")  # torch's cpp_extension compiles with $CXX
    monkeypatch.setattr(kernels, "_loaded", {})
    with caplog.at_level("WARNING", logger="loom.runtime.kernels"):
        engine = make_engine(tiny_checkpoint("qwen3"))
    assert engine.runner.attention_backend == "torch_sdpa"
    assert "kernel unavailable" in caplog.text
    assert not list((tmp_path / "torch_extensions").glob("loom_cpu_kernels_*"))  # no half-built entry
    prompt = random_prompts(4096, [12], seed=2)[0]
    final = run_to_completion(engine, [("r", prompt, greedy(5))])
    assert final["r"].token_ids == hf_greedy_many(tiny_checkpoint("qwen3"), [prompt], [5])[0]
