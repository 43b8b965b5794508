"""Per-layer attention time, Loom's CPU kernel vs the gather + SDPA reference, by query chunk length.

``python -m benchmarks.attention_kernel [THREADS]`` (default 1 thread): ``small`` preset
shapes (10 query / 5 KV heads, head_dim 64), block size 16, random caches and block tables; prints
ms per call, the reference/kernel ratio and the largest difference.  The engine sends a request to
the kernel when its chunk has at most ``KERNEL_MAX_QUERY_LEN`` tokens (``loom.runtime.kernels``).
"""

from __future__ import annotations

import sys
import time

import torch

from loom.runtime.attention import PagedAttention
from tests.runtime.test_attention_kernel import _case, _reference, _run_kernel

CASES = [(1, 64, 1), (1, 1024, 1), (1, 1024, 16), (4, 1024, 16), (8, 1024, 16), (16, 544, 1), (32, 544, 1), (64, 576, 1),
         (128, 640, 1), (512, 1024, 1), (32, 2048, 1), (256, 2048, 1)]  # (query tokens, context, batch)


def _ms(fn, n: int = 20) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1000


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    hq, hkv, d, bs = 10, 5, 64, 16
    print(f"threads {torch.get_num_threads()}, heads {hq}/{hkv}, head_dim {d}, block {bs}")
    for q_len, ctx, batch in CASES:
        q_lens, ctx_lens = [q_len] * batch, [ctx] * batch
        q, kc, vc, tables = _case(hq, hkv, d, bs, q_lens, ctx_lens, 0)
        att = PagedAttention(hq, hkv, d, d ** -0.5)
        att.k_cache, att.v_cache = kc, vc
        err = (_run_kernel(att, q, tables, q_lens, ctx_lens, bs) - _reference(att, q, tables, q_lens, ctx_lens, bs))
        tk = _ms(lambda: _run_kernel(att, q, tables, q_lens, ctx_lens, bs))
        tr = _ms(lambda: _reference(att, q, tables, q_lens, ctx_lens, bs))
        print(f"batch {batch:2d} x {q_len:4d} queries over {ctx:5d} tokens: kernel {tk:7.3f} ms, "
              f"reference {tr:7.3f} ms, ratio {tr / tk:5.2f}, max diff {err.abs().max().item():.1e}")


if __name__ == "__main__":
    main()
