"""Benchmarks and workload drivers that run whole servers or sessions; not part of the installed package.

Each module has its own command and prints its figures; the tests under ``tests/``
run small versions of the same drivers and assert what the design guarantees.

- ``python -m benchmarks.attention_kernel [THREADS]``: the CPU paged-attention kernel vs the
  gather + SDPA reference, ms per call by query chunk length.
- ``python -m benchmarks.compaction_session --turns 30``: a retrieval-heavy documentation
  session in a small window: cached share, TTFT and compactions per turn.
- ``python -m benchmarks.load --clients 256 --turns 3``: concurrent streamed session turns with
  hang-ups and malformed tool results against a real ``loom serve``.
- ``python -m benchmarks.replicas --sessions 16 --turns 8 [--kill]``: ``loom serve --replicas 2``,
  cache-aware routing vs round-robin vs one replica.
- ``python -m benchmarks.stateless``: an 8-turn conversation through the ``openai`` client
  resending its history; the share of each turn served from the prefix cache.

Engine throughput, speculative decoding and per-step overhead are ``loom bench ...``
(``loom.runtime.bench``), since an installed Loom ships them.
"""
