"""Column- and row-parallel linear layers (Megatron-LM, arXiv 1909.08053; vLLM's ``linear.py``).

Shapes with tp ranks: ``ColumnParallelLinear(in, out)`` holds ``weight [out / tp, in]`` (and bias
``[out / tp]``) and maps ``[T, in] -> [T, out / tp]``;
``RowParallelLinear(in, out)`` holds ``weight [out, in / tp]`` and maps ``[T, in / tp] -> [T, out]``,
all-reducing the partial products and adding the (unsplit) bias once.  Weights are loaded whole
(``load_full_weight``): each rank keeps its slice, so a checkpoint needs no resharding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from loom.runtime.distributed.parallel_state import (
    all_reduce,
    tensor_parallel_rank,
    tensor_parallel_world_size,
)


def _split(size: int, tp: int, what: str) -> int:
    if size % tp:
        raise ValueError(f"{what}: {size} is not divisible by the tensor-parallel size {tp}")
    return size // tp


class ColumnParallelLinear(nn.Module):
    """``y = x W^T + b`` with the output features split across ranks.

    Args:
        in_features / out_features: the whole layer's sizes.
        bias: whether it has a bias.
        output_sizes: a fused layer's parts (e.g. ``[q, k, v]`` or ``[gate, up]``), each split
            on its own so rank r holds every part's r-th slice, in part order; default one part.

    Raises:
        ValueError: a part not divisible by the tensor-parallel size, or parts not summing to
            ``out_features``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 output_sizes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.tp, self.rank = tensor_parallel_world_size(), tensor_parallel_rank()
        self.output_sizes = list(output_sizes or [out_features])
        if sum(self.output_sizes) != out_features:
            raise ValueError(f"output_sizes: {self.output_sizes} do not sum to out_features {out_features}")
        self.local_sizes = [_split(s, self.tp, "output_sizes") for s in self.output_sizes]
        self.weight = nn.Parameter(torch.empty(sum(self.local_sizes), in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(sum(self.local_sizes)), requires_grad=False) if bias else None

    def _local_rows(self, full: torch.Tensor) -> torch.Tensor:
        parts, start = [], 0
        for size, local in zip(self.output_sizes, self.local_sizes):
            parts.append(full[start + self.rank * local:start + (self.rank + 1) * local])
            start += size
        return torch.cat(parts)

    @torch.no_grad()
    def load_full_weight(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Keep this rank's slice of the whole layer's ``weight [out, in]`` (and ``bias [out]``)."""
        self.weight.copy_(self._local_rows(weight))
        if self.bias is not None and bias is not None:
            self.bias.copy_(self._local_rows(bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """``y = x W^T + b`` with the input features split across ranks; the partial sums are all-reduced.

    Args:
        in_features / out_features: the whole layer's sizes.
        bias: whether it has a bias (added once, after the all-reduce).

    Raises:
        ValueError: ``in_features`` not divisible by the tensor-parallel size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.tp, self.rank = tensor_parallel_world_size(), tensor_parallel_rank()
        self.local_in = _split(in_features, self.tp, "in_features")
        self.weight = nn.Parameter(torch.empty(out_features, self.local_in), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None

    @torch.no_grad()
    def load_full_weight(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Keep this rank's columns of the whole layer's ``weight [out, in]``; the bias whole."""
        self.weight.copy_(weight[:, self.rank * self.local_in:(self.rank + 1) * self.local_in])
        if self.bias is not None and bias is not None:
            self.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = all_reduce(nn.functional.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
