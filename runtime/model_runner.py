"""Runs one scheduled step through the model: flattened inputs in, logits out.

A step mixes decodes and prefill chunks; ``ModelRunner`` flattens them into
one token dimension (decodes first, so attention can batch them), builds
``input_ids``, ``positions``, ``slot_mapping`` and the attention metadata
(block tables turned into slot indices), runs the model under
``torch.inference_mode`` and computes logits only at the positions asked for:
``num_logits[i]`` trailing positions of request ``i`` (1 for a normal sample,
``1 + k`` when verifying ``k`` drafted tokens, 0 for a prefill chunk that does
not reach the end of the prompt).

The KV cache is one tensor ``[2, num_layers, num_blocks * block_size,
num_kv_heads, head_dim]`` allocated once; each attention layer gets views.
Attention backends (``loom.runtime.attention``): on CPU in float32 Loom's compiled
kernel reads the KV cache in place for decodes and short chunks (requests
with at most ``KERNEL_MAX_QUERY_LEN`` query tokens go first in the flattened
batch, so the kernel covers rows ``[0, kernel_rows)``); on CUDA flash-attn is
used when installed and ``block_size`` is a multiple of 256; otherwise the
gather + SDPA reference.  CUDA graphs are not implemented (decode runs eagerly).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import torch

from loom.runtime import host_memory
from loom.runtime.attention import DECODE_GROUP, AttentionMetadata, DecodeGroup, PrefillSeq, flash_attn_varlen_func
from loom.runtime.kernels import KERNEL_MAX_QUERY_LEN, cpu_paged_attention
from loom.runtime.models.llama import LlamaForCausalLM
from loom.runtime.scheduler import ScheduledRequest

if TYPE_CHECKING:
    from transformers import PretrainedConfig

logger = logging.getLogger(__name__)


def kv_bytes_per_block(hf_config: PretrainedConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of K and V for one block across all layers."""
    heads = hf_config.num_attention_heads
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    elem = torch.tensor([], dtype=dtype).element_size()
    return 2 * hf_config.num_hidden_layers * block_size * kv_heads * head_dim * elem


@dataclass(frozen=True)
class StepSeq:
    """One request's share of a step, as plain data (picklable, sent to tensor-parallel workers).

    Attributes:
        token_ids: the tokens this step computes (a prefill chunk, one decode token, or the last
            token plus drafted tokens under speculative decoding).
        num_computed_tokens: tokens already in the KV cache before this step (the chunk's first
            position).
        block_ids: the request's block table (KV block ids, in order).
    """

    token_ids: list[int]
    num_computed_tokens: int
    block_ids: list[int]


def step_seqs(scheduled: Sequence[ScheduledRequest]) -> list[StepSeq]:
    """The step's inputs, per scheduled request (drafted tokens appended past the known ones)."""
    seqs = []
    for sched in scheduled:
        req, n = sched.request, sched.num_new_tokens
        nc = req.num_computed_tokens
        chunk = req.all_token_ids[nc:nc + n]
        if len(chunk) < n:  # drafted tokens under speculative decoding
            chunk = chunk + req.spec_token_ids[: n - len(chunk)]
        seqs.append(StepSeq(chunk, nc, req.block_ids))
    return seqs


class ModelRunner:
    """Owns the model and its KV cache; executes scheduled steps.

    Args:
        model: the loaded model.
        hf_config: its transformers config.
        num_blocks / block_size: KV pool shape.
        device / dtype: where and in what the cache lives.
        attention_backend: ``EngineConfig.attention_backend``.
    """

    def __init__(
        self,
        model: LlamaForCausalLM,
        hf_config: PretrainedConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        dtype: torch.dtype,
        attention_backend: str = "auto",
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.device = device
        layers = model.attention_layers()
        first = layers[0]
        shape = (2, len(layers), num_blocks * block_size, first.num_kv_heads, first.head_dim)
        # zeros on the host are mapped, not written: only the blocks requests fill become resident
        self.kv_cache = host_memory.zeros(shape, dtype) if device.type == "cpu" else \
            torch.zeros(shape, dtype=dtype, device=device)
        for i, layer in enumerate(layers):
            layer.k_cache, layer.v_cache = self.kv_cache[0, i], self.kv_cache[1, i]
        self._ws: tuple[torch.Tensor, torch.Tensor] = (torch.empty(0, 0), torch.empty(0, 0))
        self.last_prepare_s = 0.0  # host seconds the last step spent preparing inputs
        self.attention_backend = _pick_backend(attention_backend, device, dtype, block_size)
        self.use_flash = self.attention_backend == "flash_attn"
        self.kernel = cpu_paged_attention() if self.attention_backend == "cpu_paged" else None
        if self.attention_backend == "cpu_paged" and self.kernel is None:
            self.attention_backend = "torch_sdpa"
        logger.info("attention backend: %s", self.attention_backend)

    def execute_model(
        self,
        scheduled: Sequence[ScheduledRequest],
        num_logits: Sequence[int],
        blocks_to_copy: Sequence[tuple[int, int]] = (),
        blocks_to_load: Sequence[tuple[int, torch.Tensor]] = (),
    ) -> torch.Tensor:
        """Run one step.

        Args:
            scheduled: the step's requests and token counts.
            num_logits: per request (same order), trailing positions needing logits.
            blocks_to_copy: (source, destination) block ids whose K and V, all
                layers, are copied before the forward pass (``copy_blocks``).
            blocks_to_load: (block id, KV ``[2, layers, block_size, kv_heads, head_dim]``)
                written after the copies, before the forward pass (``write_blocks``).

        Returns:
            ``[sum(num_logits), vocab]`` float32 logits, grouped by request in
            ``scheduled`` order, positions ascending within a request.
        """
        start = time.perf_counter()
        seqs = step_seqs(scheduled)
        gather_s = time.perf_counter() - start
        logits = self.execute(seqs, num_logits, blocks_to_copy, blocks_to_load=blocks_to_load)
        self.last_prepare_s += gather_s  # input preparation includes reading the requests' tokens
        return logits

    @torch.inference_mode()
    def execute(
        self,
        seqs: Sequence[StepSeq],
        num_logits: Sequence[int],
        blocks_to_copy: Sequence[tuple[int, int]] = (),
        compute_logits: bool = True,
        blocks_to_load: Sequence[tuple[int, torch.Tensor]] = (),
    ) -> torch.Tensor:
        """``execute_model`` on the step's plain inputs (what a tensor-parallel worker receives).

        ``compute_logits=False`` runs the forward pass only (ranks other than 0 under tensor
        parallelism: the LM head is replicated, rank 0 samples) and returns an empty tensor.
        """
        start = time.perf_counter()
        self.copy_blocks(blocks_to_copy)
        if blocks_to_load:
            self.write_blocks(blocks_to_load)
        input_ids, positions, meta, offsets = self._prepare(seqs)
        self.last_prepare_s = time.perf_counter() - start
        hidden = self.model(input_ids, positions, meta)
        index: list[int] = []
        for i, seq in enumerate(seqs):
            end = offsets[i] + len(seq.token_ids)
            index.extend(range(end - num_logits[i], end))
        if not index or not compute_logits:
            return torch.empty(0, self.model.config.vocab_size, device=self.device)
        return self.model.compute_logits(hidden[torch.tensor(index, device=self.device)])

    def copy_blocks(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Copy whole KV blocks, every layer, K and V: ``dst`` gets ``src``'s ``block_size`` slots.

        One gather then one scatter, so each destination gets its source's
        content as it was before any of the copies (a block popped as one
        pair's destination is never a later pair's source: popping drops its
        hash).  Cost: ``len(pairs)`` blocks' bytes (``kv_bytes_per_block``).
        """
        if not pairs:
            return
        bs = self.block_size
        offs = torch.arange(bs)
        src = (torch.tensor([s for s, _ in pairs]).unsqueeze(1) * bs + offs).reshape(-1).to(self.device)
        dst = (torch.tensor([d for _, d in pairs]).unsqueeze(1) * bs + offs).reshape(-1).to(self.device)
        self.kv_cache[:, :, dst] = self.kv_cache[:, :, src]

    def _slots(self, block_ids: Sequence[int]) -> torch.Tensor:
        offs = torch.arange(self.block_size)
        return (torch.tensor(list(block_ids)).unsqueeze(1) * self.block_size + offs).reshape(-1).to(self.device)

    def read_blocks(self, block_ids: Sequence[int]) -> torch.Tensor:
        """Whole KV blocks, every layer, K and V: ``[n, 2, layers, block_size, kv_heads, head_dim]`` in the
        cache's dtype (a copy)."""
        kv = self.kv_cache[:, :, self._slots(block_ids)]  # [2, L, n * bs, H, D]
        two, layers, _, heads, dim = kv.shape
        return kv.view(two, layers, len(block_ids), self.block_size, heads, dim).permute(2, 0, 1, 3, 4, 5).contiguous()

    def write_blocks(self, blocks: Sequence[tuple[int, torch.Tensor]]) -> None:
        """Write each ``(block id, kv)`` into the pool, ``kv`` one block as ``read_blocks`` returns it
        (``[2, layers, block_size, kv_heads, head_dim]``): one copy per block straight into its slots (a
        restarted session's 55 blocks of SmolLM2: 40 MiB, copied once rather than stacked and scattered).

        Raises:
            ValueError: a ``kv`` is not of that shape.
        """
        want = (*self.kv_cache.shape[:2], self.block_size, *self.kv_cache.shape[3:])
        bs = self.block_size
        for block_id, kv in blocks:
            if tuple(kv.shape) != want:
                raise ValueError(f"blocks_to_load: KV of shape {tuple(kv.shape)}, expected {want}")
            self.kv_cache[:, :, block_id * bs:(block_id + 1) * bs].copy_(kv)

    def _prepare(
        self, seqs: Sequence[StepSeq]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int]]:
        # Kernel backend: requests the kernel attends first.  Reference: decodes
        # first, shortest context first (so decode groups pad little), then the rest.
        if self.kernel is not None:
            order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].token_ids) > KERNEL_MAX_QUERY_LEN)
        else:
            order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].token_ids) != 1, seqs[i].num_computed_tokens))
        offsets = [0] * len(seqs)
        token_ids: list[int] = []
        starts, counts, tables = [], [], []
        for i in order:
            seq = seqs[i]
            offsets[i] = len(token_ids)
            token_ids.extend(seq.token_ids)
            starts.append(seq.num_computed_tokens)
            counts.append(len(seq.token_ids))
            tables.append(seq.block_ids)
        dev = self.device
        # Index arithmetic in NumPy (a microsecond per op against torch's ~5-10 µs
        # dispatch on CPU), handed to torch without copies.
        n_seq = len(order)
        lens = np.fromiter(map(len, tables), dtype=np.int64, count=n_seq)
        bt = np.zeros((n_seq, int(lens.max())), dtype=np.int64)
        bt[np.repeat(np.arange(n_seq), lens), np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)] = (
            np.fromiter(chain.from_iterable(tables), dtype=np.int64, count=int(lens.sum()))
        )
        counts_np = np.asarray(counts, dtype=np.int64)
        seq_of_token = np.repeat(np.arange(n_seq), counts_np)
        cu = np.cumsum(counts_np) - counts_np
        positions = np.arange(len(token_ids)) - cu[seq_of_token] + np.asarray(starts, dtype=np.int64)[seq_of_token]
        slot_mapping = bt[seq_of_token, positions // self.block_size] * self.block_size + positions % self.block_size
        block_tables = torch.from_numpy(bt)
        meta = self._metadata(torch.from_numpy(slot_mapping), block_tables, starts, counts)
        input_ids = torch.tensor(token_ids, dtype=torch.long, device=dev)
        return input_ids, torch.from_numpy(positions).to(dev), meta, offsets

    def _metadata(
        self, slot_mapping: torch.Tensor, block_tables: torch.Tensor, starts: list[int], counts: list[int]
    ) -> AttentionMetadata:
        dev, bs = self.device, self.block_size
        ctx_lens = [s + c for s, c in zip(starts, counts)]
        meta = AttentionMetadata(slot_mapping=slot_mapping.to(dev), block_size=bs)
        if self.use_flash:  # pragma: no cover - CUDA only
            return self._flash_metadata(meta, block_tables, counts, ctx_lens)
        rows = 0
        if self.kernel is not None:
            num_kernel = sum(1 for c in counts if c <= KERNEL_MAX_QUERY_LEN)
            num_decodes = 0
            if num_kernel:
                counts_np = np.asarray(counts[:num_kernel], dtype=np.int32)
                meta.kernel, meta.kernel_rows = self.kernel, int(counts_np.sum())
                meta.kernel_args = (
                    torch.from_numpy(np.cumsum(counts_np, dtype=np.int32) - counts_np),
                    torch.from_numpy(counts_np),
                    torch.from_numpy(np.asarray(ctx_lens[:num_kernel], dtype=np.int32)),
                    block_tables[:num_kernel].to(torch.int32),
                )
        else:
            num_kernel = num_decodes = sum(1 for c in counts if c == 1)
        meta.num_decodes = num_decodes
        for start in range(0, num_decodes, DECODE_GROUP):
            end = min(start + DECODE_GROUP, num_decodes)
            nblk = -(-max(ctx_lens[start:end]) // bs)
            block_ids = block_tables[start:end, :nblk].reshape(-1).to(dev)
            lens = torch.tensor(ctx_lens[start:end], device=dev)
            meta.decode_groups.append(DecodeGroup(start, end, block_ids, nblk, lens))
            rows = max(rows, (end - start) * nblk)
        q_start = meta.kernel_rows or num_decodes
        for j in range(num_kernel, len(counts)):
            prefill_blocks: torch.Tensor | None = None
            if starts[j] > 0:
                nblk = -(-ctx_lens[j] // bs)
                prefill_blocks = block_tables[j, :nblk].to(dev)
                rows = max(rows, nblk)
            meta.prefills.append(PrefillSeq(q_start, q_start + counts[j], ctx_lens[j], prefill_blocks))
            q_start += counts[j]
        meta.workspace = self._workspace(rows)
        return meta

    def _workspace(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V gather buffers of at least ``rows`` blocks, grown by doubling, reused."""
        if self._ws[0].shape[0] < rows:
            size = max(rows, 2 * self._ws[0].shape[0])
            width = self.kv_cache.shape[-1] * self.kv_cache.shape[-2] * self.block_size
            self._ws = (
                torch.empty(size, width, dtype=self.kv_cache.dtype, device=self.device),
                torch.empty(size, width, dtype=self.kv_cache.dtype, device=self.device),
            )
        return self._ws

    def _flash_metadata(  # pragma: no cover - CUDA only
        self, meta: AttentionMetadata, block_tables: torch.Tensor, counts: list[int], ctx_lens: list[int]
    ) -> AttentionMetadata:
        dev = self.device
        meta.use_flash = True
        meta.block_tables = block_tables.to(dev, dtype=torch.int32)
        meta.cu_seqlens_q = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        meta.cu_seqlens_k = torch.tensor([0, *torch.tensor(ctx_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        meta.max_seqlen_q, meta.max_seqlen_k = max(counts), max(ctx_lens)
        return meta


def _pick_backend(requested: str, device: torch.device, dtype: torch.dtype, block_size: int) -> str:
    """The attention backend to use: ``requested`` when it can run here, else ``torch_sdpa``."""
    flash_ok = device.type == "cuda" and flash_attn_varlen_func is not None and block_size % 256 == 0
    kernel_ok = device.type == "cpu" and dtype == torch.float32
    if requested == "auto":
        return "flash_attn" if flash_ok else "cpu_paged" if kernel_ok else "torch_sdpa"
    if (requested == "flash_attn" and not flash_ok) or (requested == "cpu_paged" and not kernel_ok):
        logger.warning("attention backend %s cannot run here (%s, %s); using torch_sdpa", requested, device, dtype)
        return "torch_sdpa"
    return requested
