"""Tensor parallelism inside one engine replica (issue 17), Megatron-LM style (Shoeybi et al. 2019,
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

Status: the parallel layers and their process-group plumbing, tested against a single-process
``nn.Linear`` under gloo with 2 processes.  Not yet wired into ``runtime/models/llama.py`` or the
engine (the model still runs with tp = 1).

Next (the plan, as vLLM's executor does it):

* model: ``qkv_proj`` column-parallel with ``output_sizes=[q, kv, kv]`` and ``o_proj``
  row-parallel, so each rank runs ``num_heads / tp`` query and ``num_kv_heads / tp`` KV heads
  (KV heads replicated when tp exceeds them, as vLLM); ``gate_up_proj`` column-parallel with
  ``[I, I]``, ``down_proj`` row-parallel; embeddings and ``lm_head`` replicated at first (exact,
  simple; vocab-parallel later).  The loader calls ``load_full_weight`` per layer.
* KV cache: each rank holds its own KV heads for every block, so one block table and one slot
  mapping address all ranks (the draft model's cache already works this way).
* engine: rank 0 owns the scheduler, the KV cache manager and the sampler; each step it
  broadcasts the step's inputs (token ids, positions, slot mapping, block tables, copies) and
  every rank runs the same forward; rank 0 samples from its (replicated) logits.
* test: greedy output of a tp = 2 engine in two gloo processes equal to tp = 1 token for token.
"""

from runtime.distributed.layers import ColumnParallelLinear, RowParallelLinear
from runtime.distributed.parallel_state import (
    destroy_tensor_parallel,
    init_tensor_parallel,
    tensor_parallel_rank,
    tensor_parallel_world_size,
)

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "destroy_tensor_parallel",
    "init_tensor_parallel",
    "tensor_parallel_rank",
    "tensor_parallel_world_size",
]
