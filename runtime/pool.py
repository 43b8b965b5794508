"""Sizing the KV block pool.

``num_kv_blocks`` wins when set.  On CUDA the pool takes what
``gpu_memory_utilization`` leaves after the weights and an activation reserve
(vLLM profiles a forward pass instead; here the reserve is an estimate of the
largest step's activations).  On CPU the pool is the smaller of
``cpu_kv_cache_bytes`` (1 GiB by default, so it stays under 2 GiB) and what
``max_num_seqs`` full-length sequences could use.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from loom.runtime.config import EngineConfig
from loom.runtime.model_runner import kv_bytes_per_block

if TYPE_CHECKING:
    from transformers import PretrainedConfig

logger = logging.getLogger(__name__)


def num_kv_blocks(config: EngineConfig, hf_config: PretrainedConfig, dtype: torch.dtype, device: torch.device) -> int:
    """Number of KV blocks for this engine; logs the pool size (blocks, tokens, bytes).

    Raises:
        ValueError: not even one block fits the memory left (``gpu_memory_utilization``).
    """
    per_block = kv_bytes_per_block(hf_config, config.block_size, dtype)
    assert config.max_model_len is not None, "EngineConfig.resolve() fills max_model_len first"
    max_needed = config.max_num_seqs * -(-config.max_model_len // config.block_size)
    if config.num_kv_blocks is not None:
        blocks = config.num_kv_blocks
    elif device.type == "cuda":  # pragma: no cover - CUDA only
        free, total = torch.cuda.mem_get_info(device)
        reserve = config.max_num_batched_tokens * (hf_config.vocab_size + 4 * hf_config.intermediate_size) * 4
        budget = int(total * config.gpu_memory_utilization) - (total - free) - reserve
        blocks = min(budget // per_block, max_needed)
    else:
        blocks = min(config.cpu_kv_cache_bytes // per_block, max_needed)
    if blocks < 1:
        raise ValueError("gpu_memory_utilization: no memory left for a single KV block")
    logger.info(
        "KV cache pool: %d blocks x %d tokens = %d tokens, %.1f MiB (%s, %s)",
        blocks, config.block_size, blocks * config.block_size, blocks * per_block / 2**20, dtype, device,
    )
    return int(blocks)
