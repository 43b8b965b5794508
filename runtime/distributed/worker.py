"""One tensor-parallel rank: a process that holds a slice of the model and its KV heads.

``run_worker`` is the process's main (started by ``TensorParallelExecutor`` with the ``spawn``
method): join the group, load the whole checkpoint, keep this rank's slice (``shard_model``), build
a ``ModelRunner`` over this rank's KV heads, then serve steps from the pipe until told to stop or
the engine goes away (the pipe closes).  Every rank runs every step, so the all-reduces inside the
row-parallel layers meet; rank 0 alone computes and returns logits.

Messages on the pipe (engine -> worker): ``("execute", seqs, num_logits, blocks_to_copy)`` and
``("shutdown",)``.  Replies: ``("ready", attention_backend)`` once, then per step
``("ok", logits, prepare_s)`` (``logits``: float32 ``[sum(num_logits), vocab]`` NumPy array on
rank 0, ``None`` elsewhere) or ``("error", message)``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerArgs:
    """What a rank needs to build its share of the engine (picklable).

    Attributes:
        rank / world_size: this rank and the tensor-parallel size.
        init_method: the group's rendezvous URL (``tcp://127.0.0.1:PORT``).
        model_path: the resolved checkpoint folder.
        hf_overrides: config overrides (``EngineConfig.hf_overrides``).
        dtype / device: torch dtype name and device (``cuda`` ranks take ``cuda:RANK``).
        load_format / max_model_len / seed: as ``EngineConfig``.
        num_blocks / block_size: the KV pool shape (the same on every rank).
        attention_backend: ``EngineConfig.attention_backend``.
        num_threads: torch intra-op threads of this rank (CPU).
    """

    rank: int
    world_size: int
    init_method: str
    model_path: str
    hf_overrides: JSONObject
    dtype: str
    device: str
    load_format: str
    max_model_len: int
    seed: int
    num_blocks: int
    block_size: int
    attention_backend: str
    num_threads: int


def _build_runner(args: WorkerArgs) -> Any:
    import torch

    from loom.runtime.distributed.parallel_state import init_tensor_parallel
    from loom.runtime.distributed.shard import shard_model
    from loom.runtime.model_runner import ModelRunner
    from loom.runtime.models.loader import load_hf_config, load_model

    device = torch.device(f"cuda:{args.rank}" if args.device.startswith("cuda") else args.device)
    if device.type == "cuda":  # pragma: no cover - CUDA only
        torch.cuda.set_device(device)
    torch.set_num_threads(args.num_threads)
    init_tensor_parallel(args.rank, args.world_size, args.init_method,
                         backend="nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(args.seed)
    hf_config = load_hf_config(Path(args.model_path), args.hf_overrides)
    dtype = getattr(torch, args.dtype)
    model = load_model(Path(args.model_path), hf_config, dtype=dtype, device=device,
                       load_format=args.load_format, max_positions=args.max_model_len, seed=args.seed)
    shard_model(model)
    return ModelRunner(model, hf_config, args.num_blocks, args.block_size, device, dtype, args.attention_backend)


def run_worker(args: WorkerArgs, conn: Connection) -> None:
    """The rank's main loop (see the module docstring); returns when told to stop or orphaned."""
    logging.basicConfig(level=os.environ.get("LOOM_LOG_LEVEL", "WARNING"))
    from loom.runtime.distributed.parallel_state import destroy_tensor_parallel

    try:
        runner = _build_runner(args)
        conn.send(("ready", runner.attention_backend))
    except Exception as exc:  # noqa: BLE001 - reported to the engine, which raises it
        conn.send(("error", f"rank {args.rank} could not start: {type(exc).__name__}: {exc}"))
        return
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the engine is gone
                return
            if msg[0] == "shutdown":
                return
            _, seqs, num_logits, blocks_to_copy = msg
            try:
                logits = runner.execute(seqs, num_logits, blocks_to_copy, compute_logits=args.rank == 0)
                out = logits.float().cpu().numpy() if args.rank == 0 else None
                conn.send(("ok", out, runner.last_prepare_s))
            except Exception as exc:  # noqa: BLE001 - the engine fails the step's requests
                logger.exception("rank %d: step failed", args.rank)
                conn.send(("error", f"rank {args.rank}: {type(exc).__name__}: {exc}"))
                return
    finally:
        destroy_tensor_parallel()
