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
