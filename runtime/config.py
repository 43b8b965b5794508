"""Engine configuration: one dataclass, validated field by field.

``EngineConfig`` names follow vLLM's engine arguments (``block_size``,
``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
``enable_prefix_caching``, ``load_format``, ``gpu_memory_utilization``).
Every invalid value raises ``ValueError`` naming the field; unknown keyword
arguments raise ``TypeError`` (the dataclass does that for us) instead of being
dropped silently.  Values that depend on the checkpoint (``max_model_len``, the
torch dtype, the device) are resolved by :meth:`EngineConfig.resolve` once the
Hugging Face config is loaded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loom.json_types import JSONObject

# Host phases of one engine step, the keys of ``LLMEngine.step_times`` (seconds).
if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

STEP_PHASES = ("schedule", "prepare_inputs", "model", "sampler", "output_processing")

_DTYPES = ("float32", "bfloat16", "float16", "auto")
_LOAD_FORMATS = ("auto", "safetensors", "dummy")
_ATTENTION_BACKENDS = ("auto", "cpu_paged", "torch_sdpa", "flash_attn")


@dataclass
class EngineConfig:
    """Everything the engine needs to start.

    Attributes:
        model: local checkpoint folder or Hugging Face hub id.
        dtype: weights and KV cache dtype; ``"auto"`` takes the checkpoint's
            ``dtype`` (float32 when it names none).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when available).
        block_size: tokens per KV block.
        num_kv_blocks: size of the KV block pool; ``None`` sizes it from memory
            (``gpu_memory_utilization`` on CUDA, at most ``cpu_kv_cache_bytes`` on CPU).
        gpu_memory_utilization: fraction of GPU memory the engine may use in all.
        cpu_kv_cache_bytes: upper bound of the CPU KV pool (bytes) when
            ``num_kv_blocks`` is ``None``; the pool is also capped at what
            ``max_num_seqs`` sequences of ``max_model_len`` tokens need.
        max_num_seqs: most requests in one step (running batch size).
        max_num_batched_tokens: per-step token budget (prefill chunks + decodes).
        max_model_len: context window in tokens; ``None`` takes the model's
            ``max_position_embeddings``.
        enable_prefix_caching: reuse KV blocks of identical prefixes (vLLM APC).
        kv_retention_max_fraction: most of the pool one ``kv_retention`` key may pin (a fraction
            in (0, 1]; :mod:`loom.runtime.kv_retention`).
        kv_retention_max_ttl_s: longest a pin lasts (seconds); a longer ``ttl_s`` is cut to it.
        kv_tier_dir: a folder for the disk tier (``loom.runtime.kv_tier``): pinned blocks that must
            leave the pool, and every pinned block at shutdown, are written there and loaded back on
            a later prefix hit, also by a restarted engine; ``None``: no tier.
        kv_tier_bytes: size budget of the tier's files for this model (bytes).
        load_format: ``"auto"``/``"safetensors"`` read the checkpoint's weights,
            ``"dummy"`` builds random weights from its config alone.
        seed: seed of the engine's sampling generator and of dummy weights.
        speculative_config: a ``loom.runtime.spec_decode.SpeculativeConfig`` (or a dict of
            its fields), or ``None`` (no speculative decoding).
        max_waiting: most requests waiting to be scheduled before
            ``QueueFullError``.
        enforce_eager: never capture CUDA graphs (no effect on CPU).
        quantization: ``"auto"`` (default), ``None`` (weights in ``dtype``),
            ``"int8"`` (per-channel) or ``"int4"`` (group-wise,
            ``quantization_group_size`` input channels per group): weight-only
            quantization of every linear layer, the LM head and the embedding
            (``loom.runtime.quantization``); activations and the KV cache stay
            in ``dtype``.  vLLM's ``--quantization``.  One rank; on CUDA int4 needs
            sm80 or newer (PyTorch's tinygemm) and int8 Triton.
            ``"auto"`` takes the registered model's format (``loom model list``)
            when ``model`` is a registered name, the device is the CPU, dtype
            float32 and one rank; anything else (a folder, a hub id) loads as
            is, so float32 stays the reference compared with transformers.
        quantization_group_size: int4 group size, 32, 64 or 128.
        tensor_parallel_size: ranks the model is split over (vLLM's
            ``--tensor-parallel-size``); above 1 the model runs in that many
            worker processes (``loom.runtime.distributed``: gloo on CPU, NCCL on
            CUDA with one GPU per rank).
        attention_backend: ``"auto"`` (flash-attn on CUDA when installed, Loom's
            compiled ``cpu_paged`` kernel on CPU in float32, else
            ``torch_sdpa``), or one of ``"cpu_paged"``, ``"torch_sdpa"`` (the
            gather + SDPA reference), ``"flash_attn"``; vLLM's
            ``VLLM_ATTENTION_BACKEND``.  A named backend that cannot run here
            falls back to ``torch_sdpa`` with a log line.

    Raises:
        ValueError: naming the field, for any invalid value.
    """

    model: str
    dtype: str = "float32"
    device: str = "auto"
    block_size: int = 16
    num_kv_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    cpu_kv_cache_bytes: int = 1 << 30
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    kv_retention_max_fraction: float = 0.5
    kv_retention_max_ttl_s: float = 3600.0
    kv_tier_dir: str | None = None
    kv_tier_bytes: int = 2 << 30
    load_format: str = "auto"
    seed: int = 0
    speculative_config: Any = None
    max_waiting: int = 4096
    enforce_eager: bool = False
    attention_backend: str = "auto"
    tensor_parallel_size: int = 1
    quantization: str | None = "auto"
    quantization_group_size: int = 32
    tokenizer: str | None = None
    hf_overrides: JSONObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model = str(self.model)
        if not self.model:
            raise ValueError("model: must name a checkpoint folder or hub id")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype: must be one of {_DTYPES}, got {self.dtype!r}")
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device: must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        _positive("block_size", self.block_size)
        if self.num_kv_blocks is not None:
            _positive("num_kv_blocks", self.num_kv_blocks)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError("gpu_memory_utilization: must be in (0, 1]")
        _positive("cpu_kv_cache_bytes", self.cpu_kv_cache_bytes)
        _positive("max_num_seqs", self.max_num_seqs)
        _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        if self.max_model_len is not None:
            _positive("max_model_len", self.max_model_len)
        if self.load_format not in _LOAD_FORMATS:
            raise ValueError(f"load_format: must be one of {_LOAD_FORMATS}, got {self.load_format!r}")
        _positive("max_waiting", self.max_waiting)
        if not 0.0 < self.kv_retention_max_fraction <= 1.0:
            raise ValueError("kv_retention_max_fraction: must be in (0, 1]")
        if not self.kv_retention_max_ttl_s > 0:
            raise ValueError("kv_retention_max_ttl_s: must be a positive number of seconds")
        _positive("kv_tier_bytes", self.kv_tier_bytes)
        _positive("tensor_parallel_size", self.tensor_parallel_size)
        if self.attention_backend not in _ATTENTION_BACKENDS:
            raise ValueError(
                f"attention_backend: must be one of {_ATTENTION_BACKENDS}, got {self.attention_backend!r}"
            )
        if self.quantization == "none":
            self.quantization = None
        if self.quantization is not None and self.quantization != "auto":
            from loom.runtime.quantization import QUANTIZATION_METHODS
            from loom.runtime.quantization.int4 import GROUP_SIZES

            if self.quantization not in QUANTIZATION_METHODS:
                raise ValueError(f"quantization: must be one of {QUANTIZATION_METHODS}, 'auto' or None, "
                                 f"got {self.quantization!r}")
            if self.quantization_group_size not in GROUP_SIZES:
                raise ValueError(f"quantization_group_size: must be one of {GROUP_SIZES}, "
                                 f"got {self.quantization_group_size!r}")
            if self.tensor_parallel_size > 1:
                raise ValueError("quantization: not supported with tensor_parallel_size > 1")
        if self.speculative_config is not None:
            from loom.runtime.spec_decode.config import SpeculativeConfig

            if isinstance(self.speculative_config, dict):
                self.speculative_config = SpeculativeConfig(**self.speculative_config)
            if not isinstance(self.speculative_config, SpeculativeConfig):
                raise ValueError("speculative_config: must be a SpeculativeConfig, a dict of its fields, or None")

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def resolve(self, hf_config: PretrainedConfig) -> int:
        """Fill ``max_model_len`` from the checkpoint's config, check it and return it.

        Raises:
            ValueError: ``max_model_len`` larger than the model's
                ``max_position_embeddings``.
        """
        limit = int(getattr(hf_config, "max_position_embeddings", 0) or 0) or None
        if self.max_model_len is None:
            self.max_model_len = limit or 4096
        elif limit is not None and self.max_model_len > limit:
            raise ValueError(
                f"max_model_len: {self.max_model_len} exceeds the model's max_position_embeddings ({limit})"
            )
        return self.max_model_len

    def resolve_quantization(self, device: torch.device, dtype: torch.dtype) -> str | None:
        """Turn ``quantization="auto"`` into the method to use (or ``None``), store and return it."""
        import torch

        if self.quantization == "auto":
            from loom.runtime.checkpoint.registry import registered_format

            usable = device.type == "cpu" and dtype == torch.float32 and self.tensor_parallel_size == 1
            self.quantization = registered_format(self.model) if usable else None
        return self.quantization

    def torch_dtype(self, hf_config: PretrainedConfig) -> torch.dtype:
        """The ``torch.dtype`` of weights and KV cache for this config."""
        import torch

        if self.dtype == "auto":
            name = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
            if isinstance(name, torch.dtype):
                return name
            return getattr(torch, str(name)) if name else torch.float32
        return getattr(torch, self.dtype)

    def torch_device(self) -> torch.device:
        """The ``torch.device`` the engine runs on."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")
