"""The tensor-parallel process group: initialisation, rank, world size and the all-reduce.

One process per rank.  ``init_tensor_parallel`` wraps ``torch.distributed.init_process_group``
(``gloo`` on CPU, ``nccl`` on CUDA, vLLM's choice); without it every helper acts as tp = 1, so
single-process code paths need no branches.
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (a rendezvous or a replica's server binds it next)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def init_tensor_parallel(rank: int, world_size: int, init_method: str, backend: str | None = None) -> None:
    """Join the tensor-parallel group (blocks until every rank has joined).

    Args:
        rank: this process's rank, ``0 <= rank < world_size``.
        world_size: tensor-parallel size (processes).
        init_method: rendezvous URL, e.g. ``tcp://127.0.0.1:29500``.
        backend: ``gloo`` / ``nccl``; default ``nccl`` when CUDA is available, else ``gloo``.

    Raises:
        ValueError: a rank outside ``[0, world_size)``.
        RuntimeError: from ``torch.distributed`` when the rendezvous fails.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: {rank} is outside [0, {world_size})")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)


def destroy_tensor_parallel() -> None:
    """Leave the group (no-op when none was joined)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def tensor_parallel_world_size() -> int:
    """Ranks in the group; 1 without one."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def tensor_parallel_rank() -> int:
    """This process's rank; 0 without a group."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over the ranks, in place; returned for chaining (identity at tp = 1)."""
    if tensor_parallel_world_size() > 1:
        dist.all_reduce(x)
    return x

