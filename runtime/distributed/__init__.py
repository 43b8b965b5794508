"""Tensor parallelism inside one engine replica, Megatron-LM style (Shoeybi et al. 2019,
arXiv 1909.08053) as vLLM splits its layers.

Design:

* ``parallel_state``: one process per rank, ``torch.distributed`` initialised with ``gloo`` on CPU
  (tests, this machine) or ``nccl`` on CUDA; the tensor-parallel group is the whole world (one replica
  = one process group; replicas are separate groups, served by Ray Serve).
* ``layers``: ``ColumnParallelLinear`` splits the output features (each rank holds ``out / tp``
  rows of the weight; fused projections such as QKV or gate/up give their ``output_sizes`` so each
  part is split on its own, as vLLM's ``QKVParallelLinear`` / ``MergedColumnParallelLinear``);
  ``RowParallelLinear`` splits the input features and all-reduces the partial outputs, adding the
  bias once after the reduction.  An attention block is column (QKV, heads split across ranks) then
  row (output projection); an MLP is column (gate/up) then row (down): one all-reduce per block.

Wiring (``tensor_parallel_size`` in ``EngineConfig``, ``loom serve -tp N``):

* ``shard``: each rank loads the whole checkpoint, then keeps its slice: ``qkv_proj``
  column-parallel with ``output_sizes=[q, kv, kv]``, ``o_proj`` row-parallel, ``gate_up_proj``
  column-parallel with ``[I, I]``, ``down_proj`` row-parallel, so each rank runs
  ``num_heads / tp`` query and ``num_kv_heads / tp`` KV heads; embeddings, norms and ``lm_head``
  replicated (exact and simple; vocab-parallel later).  Heads not divisible by tp are refused
  (vLLM replicates KV heads when tp exceeds them; not built).
* KV cache: each rank holds its own KV heads for every block, so one block table and one slot
  mapping address all ranks.
* ``worker`` / ``executor``: the engine process keeps the scheduler, the KV cache manager and the
  sampler; each step it sends every rank the step's plain inputs (``model_runner.StepSeq``) over
  a pipe, every rank runs the same forward (the all-reduces meet), rank 0 returns the logits.
* tested: greedy output of a tp = 2 engine in two gloo processes equal to HF ``generate``, and a
  tp = 3 real SmolLM2 equal to tp = 1, token for token (``tests/runtime/test_tensor_parallel_engine.py``).
"""

from loom.runtime.distributed.layers import ColumnParallelLinear, RowParallelLinear
from loom.runtime.distributed.parallel_state import (
    destroy_tensor_parallel,
    free_port,
    init_tensor_parallel,
    tensor_parallel_rank,
    tensor_parallel_world_size,
)

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "destroy_tensor_parallel",
    "free_port",
    "init_tensor_parallel",
    "tensor_parallel_rank",
    "tensor_parallel_world_size",
]
