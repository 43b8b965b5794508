"""``TensorParallelExecutor``: the engine's model runner when ``tensor_parallel_size > 1``.

vLLM's multiprocessing executor in small: the engine process keeps the scheduler, the KV cache
manager (block accounting only: every rank's cache has the same blocks) and the sampler; the
model lives in ``tp`` worker processes (``loom.runtime.distributed.worker``), one per rank, which hold
the weights' slices and their KV heads.  Each step the executor sends every rank the same plain
inputs (``StepSeq`` per request, logits rows, block copies), all ranks run the forward pass in
lockstep (their all-reduces meet), and rank 0 returns the logits.

Failure: a rank that raises or dies fails the step (the engine fails that step's requests, as for
any failed step) and takes the group down: the other ranks are stopped, and every later step
raises ``TensorParallelError`` at once, so requests finish with ``finish_reason="error"`` instead
of hanging on an all-reduce that will never meet.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from loom.runtime.config import EngineConfig
from loom.runtime.distributed.parallel_state import free_port
from loom.runtime.distributed.shard import check_tensor_parallel_shape
from loom.runtime.distributed.worker import WorkerArgs, run_worker
from loom.runtime.errors import LoomError
from loom.runtime.model_runner import step_seqs
from loom.runtime.scheduler import ScheduledRequest
from loom.runtime.threads import default_num_threads

if TYPE_CHECKING:
    from transformers import PretrainedConfig

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0  # a rank loading a large checkpoint from a slow disk


class TensorParallelError(LoomError):
    """A tensor-parallel rank failed or died; the engine's model is gone."""


class TensorParallelExecutor:
    """Runs the model split over ``config.tensor_parallel_size`` worker processes.

    Same surface as ``ModelRunner`` for the engine: ``execute_model``, ``attention_backend``,
    ``last_prepare_s``; plus ``shutdown``.

    Args:
        config: the engine's config (``tensor_parallel_size``, dtype, device, load format...).
        model_path: the resolved checkpoint folder.
        hf_config: its transformers config.
        num_blocks: the KV pool's blocks (each rank allocates them for its own KV heads).
        dtype: weights and KV cache dtype.

    Raises:
        ValueError: the model's heads or intermediate size not divisible by the size.
        TensorParallelError: a rank could not start (its error message says why).
    """

    def __init__(self, config: EngineConfig, model_path: Path, hf_config: PretrainedConfig, num_blocks: int,
                 dtype: torch.dtype) -> None:
        tp = config.tensor_parallel_size
        check_tensor_parallel_shape(hf_config, tp)
        self.last_prepare_s = 0.0
        self._dead: str | None = None
        ctx = mp.get_context("spawn")
        url = f"tcp://127.0.0.1:{free_port()}"
        threads = max(1, min(torch.get_num_threads(), default_num_threads() // tp))
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for rank in range(tp):
            args = WorkerArgs(rank, tp, url, str(model_path), dict(config.hf_overrides),
                              str(dtype).removeprefix("torch."), str(config.torch_device()), config.load_format,
                              int(config.max_model_len or 0), config.seed, num_blocks, config.block_size,
                              config.attention_backend, threads)
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=run_worker, args=(args, child), name=f"loom-tp-rank{rank}", daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        replies = self._gather(timeout=START_TIMEOUT_S)
        self.attention_backend = replies[0][1]
        logger.info("tensor parallel: %d ranks ready (%s, %d threads each)", tp, self.attention_backend, threads)

    def execute_model(self, scheduled: Sequence[ScheduledRequest], num_logits: Sequence[int],
                      blocks_to_copy: Sequence[tuple[int, int]] = ()) -> torch.Tensor:
        """``ModelRunner.execute_model`` across the ranks; logits ``[sum(num_logits), vocab]`` float32.

        Raises:
            TensorParallelError: a rank failed or died (now or in an earlier step).
        """
        if self._dead is not None:
            raise TensorParallelError(f"the tensor-parallel workers are gone ({self._dead})")
        start = time.perf_counter()
        msg = ("execute", step_seqs(scheduled), list(num_logits), list(blocks_to_copy))
        gather_s = time.perf_counter() - start
        for conn in self._conns:
            try:
                conn.send(msg)
            except OSError as exc:
                self._fail(f"a rank's pipe is closed: {exc}")
        replies = self._gather(timeout=None)
        self.last_prepare_s = gather_s + float(replies[0][2])  # rank 0's own preparation
        return torch.from_numpy(replies[0][1])

    def _gather(self, timeout: float | None) -> list[tuple[Any, ...]]:
        """One reply from every rank, in rank order; any error or death fails the group."""
        replies: dict[int, tuple[Any, ...]] = {}
        pending = dict(enumerate(self._conns))
        sentinels = {p.sentinel: rank for rank, p in enumerate(self._procs)}
        while pending:
            ready = wait([*pending.values(), *sentinels], timeout)
            if not ready:
                self._fail(f"no reply from ranks {sorted(pending)} within {timeout:.0f} s")
            for rank, conn in list(pending.items()):
                if conn in ready:
                    try:
                        reply = conn.recv()
                    except (EOFError, OSError):
                        self._fail(f"rank {rank} died")
                    if reply[0] == "error":
                        self._fail(reply[1])
                    replies[rank] = reply
                    del pending[rank]
            for sentinel, rank in sentinels.items():
                if sentinel in ready and rank in pending and not pending[rank].poll():
                    self._fail(f"rank {rank} exited (code {self._procs[rank].exitcode})")
        return [replies[r] for r in range(len(self._conns))]

    def _fail(self, reason: str) -> None:
        self._dead = reason
        self.shutdown()
        raise TensorParallelError(f"tensor parallel: {reason}")

    def shutdown(self) -> None:
        """Stop every rank (idempotent): ask, then terminate what is left."""
        for conn in self._conns:
            try:
                conn.send(("shutdown",))
            except OSError:
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
        if self._dead is None:
            self._dead = "shut down"
