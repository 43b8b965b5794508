"""Paged attention over a block-structured KV cache (PagedAttention, arXiv 2309.06180).

Each layer owns two cache tensors, ``k_cache`` and ``v_cache``, shaped
``[num_blocks * block_size, num_kv_heads, head_dim]`` (the block dimension
flattened so a slot index addresses one token).  A forward pass first writes
the new tokens' K/V at ``slot_mapping`` for *all* tokens of the batch, then
attends, so a request may read prefix blocks another request of the same step
is writing (prefix caching relies on this).

The batch is flattened into one token dimension, decodes first (vLLM's
reordering).  Backends, chosen at start (``EngineConfig.attention_backend``):

* ``cpu_paged`` (CPU, float32; the CPU default): Loom's compiled kernel
  (``loom.runtime.kernels``) reads each block where it lies in the cache for every
  request with at most ``KERNEL_MAX_QUERY_LEN`` query tokens this step
  (decodes, verification of drafted tokens, short suffixes), all of them in
  one call per layer; longer prefill chunks take the reference path below.
* ``torch_sdpa`` — the reference (CPU, or CUDA without flash-attn; what tests
  compare the kernel against): decodes are batched, sorted by
  context length and cut into groups of ``DECODE_GROUP`` requests so each
  group pads only to its own longest context — their K/V blocks are gathered whole (one ``index_select`` of contiguous
  ``block_size * Hkv * D`` rows into a workspace reused by every layer and
  step, which on CPU avoids page-faulting a fresh buffer per layer) into
  ``[B, nblk * block_size, Hkv, D]`` with a padding mask, and the query heads
  of one KV group are folded into the query-length dimension so GQA needs no
  K/V repetition; each prefill chunk (or any request with several query
  tokens, e.g. drafted tokens under speculative decoding) runs SDPA over its
  gathered context with a bottom-right-aligned causal mask.
* flash-attn (CUDA, ``block_size % 256 == 0``): ``flash_attn_varlen_func`` with
  ``block_table`` over the whole batch.  Untested here (no GPU in the session
  that wrote it).

Sliding-window attention (Mistral, Qwen2 ``use_sliding_window``) follows
transformers: key ``j`` is visible to query ``i`` when ``i - window < j <= i``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

try:  # pragma: no cover - only on CUDA machines with flash-attn
    from flash_attn import flash_attn_varlen_func
except Exception:  # noqa: BLE001 - any import failure means "not available"
    flash_attn_varlen_func = None


@dataclass
class PrefillSeq:
    """A request with several query tokens this step.

    Attributes:
        q_start / q_end: its rows in the flattened batch.
        ctx_len: tokens it attends to, including this step's (tokens).
        block_ids: ``[ceil(ctx_len / block_size)]`` int64 blocks of its
            context, or ``None`` when the chunk is the whole context (attend
            to the fresh K/V).
    """

    q_start: int
    q_end: int
    ctx_len: int
    block_ids: torch.Tensor | None


DECODE_GROUP = 16


@dataclass
class DecodeGroup:
    """Consecutive single-token decodes attended together.

    Attributes:
        start / end: their rows in the flattened batch.
        block_ids: ``[B * nblk]`` int64, each block table padded to ``nblk``
            blocks (padding is block 0, masked out).
        num_blocks: ``nblk``.
        lens: ``[B]`` int64 context lengths (tokens).
    """

    start: int
    end: int
    block_ids: torch.Tensor
    num_blocks: int
    lens: torch.Tensor


@dataclass
class AttentionMetadata:
    """Per-step inputs shared by every layer.

    Attributes:
        slot_mapping: ``[T]`` int64, cache slot of each token of the batch.
        num_decodes: the first ``num_decodes`` tokens are single-token decodes.
        decode_groups: those decodes in groups (ascending context length).
        workspace: two ``[rows, block_size * Hkv * D]`` buffers (K, V) the
            gathers write into, shared by all layers.
        prefills: the remaining requests, in batch order.
        block_tables / cu_seqlens_q / cu_seqlens_k / block_size: flash-attn
            inputs (CUDA only).
        kernel: the compiled CPU kernel (``loom.runtime.kernels``) or ``None``.
        kernel_rows: the first ``kernel_rows`` tokens belong to requests the
            kernel attends (their ``decode_groups`` stay empty).
        kernel_args: ``(q_start [N], q_len [N], ctx_len [N], block_tables [N, W])``
            int32, for those requests.
    """

    slot_mapping: torch.Tensor
    num_decodes: int = 0
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    workspace: tuple[torch.Tensor, torch.Tensor] | None = None
    prefills: list[PrefillSeq] = field(default_factory=list)
    block_tables: torch.Tensor | None = None
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    block_size: int = 16
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    use_flash: bool = False
    kernel: Callable[..., torch.Tensor] | None = None
    kernel_rows: int = 0
    kernel_args: tuple[torch.Tensor, ...] = ()
    _masks: dict[tuple[str, int, int | None], torch.Tensor] = field(default_factory=dict)

    def decode_mask(self, index: int, window: int | None) -> torch.Tensor:
        """``[B, 1, 1, Lmax]`` bool: True where decode group ``index`` may attend."""
        key = ("decode", index, window)
        if key not in self._masks:
            group = self.decode_groups[index]
            pos = torch.arange(group.num_blocks * self.block_size, device=group.lens.device)
            lens = group.lens[:, None]
            mask = pos[None, :] < lens
            if window is not None:
                mask &= pos[None, :] > lens - 1 - window
            self._masks[key] = mask[:, None, None, :]
        return self._masks[key]

    def prefill_mask(self, index: int, window: int | None) -> torch.Tensor | None:
        """``[q_len, ctx_len]`` bool causal (and window) mask, ``None`` = plain causal."""
        seq = self.prefills[index]
        q_len = seq.q_end - seq.q_start
        if seq.block_ids is None and (window is None or window >= seq.ctx_len):
            return None
        key = ("prefill", index, window)
        if key not in self._masks:
            q_pos = torch.arange(seq.ctx_len - q_len, seq.ctx_len, device=self.slot_mapping.device)[:, None]
            k_pos = torch.arange(seq.ctx_len, device=self.slot_mapping.device)[None, :]
            mask = k_pos <= q_pos
            if window is not None:
                mask &= k_pos > q_pos - window
            self._masks[key] = mask
        return self._masks[key]


class PagedAttention(torch.nn.Module):
    """Attention of one layer over the paged KV cache.

    Args:
        num_heads: query heads. num_kv_heads: key/value heads (GQA when fewer).
        head_dim: per-head size. scale: softmax scale (usually head_dim ** -0.5).
        sliding_window: window in tokens, or ``None`` for full attention.
    """

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, sliding_window: int | None = None
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.sliding_window = sliding_window
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Write ``k``/``v`` into the cache, then attend.

        Args:
            q: ``[T, Hq, D]``; k, v: ``[T, Hkv, D]`` (model dtype).
            meta: the step's ``AttentionMetadata``.

        Returns:
            ``[T, Hq * D]`` attention output.
        """
        if self.k_cache.numel():
            self.k_cache.index_copy_(0, meta.slot_mapping, k)
            self.v_cache.index_copy_(0, meta.slot_mapping, v)
        return self.attend(q, k, v, meta)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Attend, with this step's ``k``/``v`` already in the cache (:meth:`forward`'s second half; the fused
        CPU path writes them in its rotary kernel).  Shapes as :meth:`forward`."""
        if meta.use_flash:
            return self._flash(q, meta)
        if meta.kernel_rows and meta.kernel is not None:
            out = meta.kernel(
                q.contiguous(), self.k_cache, self.v_cache, *meta.kernel_args, meta.block_size, self.scale, self.sliding_window or 0
            )
        else:
            out = torch.empty_like(q)
        for i, group in enumerate(meta.decode_groups):
            out[group.start:group.end] = self._decode(q[group.start:group.end], meta, i)
        for i, seq in enumerate(meta.prefills):
            out[seq.q_start:seq.q_end] = self._prefill(q, k, v, meta, i)
        return out.view(q.shape[0], -1)

    def _decode(self, q: torch.Tensor, meta: AttentionMetadata, index: int) -> torch.Tensor:
        b, group = q.shape[0], self.num_heads // self.num_kv_heads
        block_ids = meta.decode_groups[index].block_ids
        assert meta.workspace is not None  # the model runner allocates it whenever there are decode groups
        keys = self._gather(self.k_cache, block_ids, meta.workspace[0], meta.block_size)
        values = self._gather(self.v_cache, block_ids, meta.workspace[1], meta.block_size)
        keys = keys.view(b, -1, self.num_kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, L, D]
        values = values.view(b, -1, self.num_kv_heads, self.head_dim).transpose(1, 2)
        # Fold the G query heads of a KV group into the query-length axis: one
        # [G, L] score matrix per (request, KV head), no K/V repetition.
        qg = q.view(b, self.num_kv_heads, group, self.head_dim)
        mask = meta.decode_mask(index, self.sliding_window)
        out = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask, scale=self.scale)
        return out.reshape(b, self.num_heads, self.head_dim)

    def _prefill(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, index: int
    ) -> torch.Tensor:
        seq = meta.prefills[index]
        qs = q[seq.q_start:seq.q_end].transpose(0, 1).unsqueeze(0)  # [1, Hq, n, D]
        if seq.block_ids is None:
            keys, values = k[seq.q_start:seq.q_end], v[seq.q_start:seq.q_end]
        else:
            assert meta.workspace is not None  # allocated whenever a prefill reads cached blocks
            keys = self._gather(self.k_cache, seq.block_ids, meta.workspace[0], meta.block_size)[: seq.ctx_len]
            values = self._gather(self.v_cache, seq.block_ids, meta.workspace[1], meta.block_size)[: seq.ctx_len]
        keys = keys.transpose(0, 1).unsqueeze(0)  # [1, Hkv, ctx, D]
        values = values.transpose(0, 1).unsqueeze(0)
        mask = meta.prefill_mask(index, self.sliding_window)
        gqa = self.num_heads != self.num_kv_heads
        if mask is None:
            out = F.scaled_dot_product_attention(qs, keys, values, is_causal=True, scale=self.scale, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=gqa)
        return out.squeeze(0).transpose(0, 1)

    def _gather(self, cache: torch.Tensor, block_ids: torch.Tensor, buf: torch.Tensor, block_size: int) -> torch.Tensor:
        """Copy whole blocks ``block_ids`` of ``cache`` into ``buf``; returns ``[n * block_size, Hkv, D]``."""
        out = buf[: block_ids.numel()]
        torch.index_select(cache.view(-1, buf.shape[1]), 0, block_ids, out=out)
        return out.view(-1, self.num_kv_heads, self.head_dim)

    def _flash(self, q: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:  # pragma: no cover - CUDA only
        window = (-1, -1) if self.sliding_window is None else (self.sliding_window - 1, 0)
        shape = (-1, meta.block_size, self.num_kv_heads, self.head_dim)
        out = flash_attn_varlen_func(
            q,
            self.k_cache.view(shape),
            self.v_cache.view(shape),
            cu_seqlens_q=meta.cu_seqlens_q,
            cu_seqlens_k=meta.cu_seqlens_k,
            max_seqlen_q=meta.max_seqlen_q,
            max_seqlen_k=meta.max_seqlen_k,
            softmax_scale=self.scale,
            causal=True,
            window_size=window,
            block_table=meta.block_tables,
        )
        return out.view(q.shape[0], -1)
