"""Token bitmasks: one bit per vocabulary entry, 32 tokens per int32 word.

The layout is llguidance's (``llguidance.torch.get_bitmask_shape``): row ``i``,
bit ``t % 32`` of word ``t // 32`` is set when token ``t`` is allowed.  The
apply step is plain PyTorch (llguidance's own helper goes through
``torch.compile``, which costs seconds of compile time on a CPU host).
"""

from __future__ import annotations

import torch

_BITS = torch.arange(32, dtype=torch.int32)


def bitmask_words(vocab_size: int) -> int:
    """Number of int32 words per row for ``vocab_size`` tokens."""
    return (vocab_size + 31) // 32


def allocate_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """All-allowed bitmask, int32 ``[num_rows, ceil(vocab_size / 32)]`` on CPU."""
    return torch.full((num_rows, bitmask_words(vocab_size)), -1, dtype=torch.int32)


def bitmask_to_bool(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Unpack int32 ``[N, W]`` into a bool ``[N, vocab_size]`` allowed-mask.

    Tokens past ``32 * W`` (a model vocabulary padded beyond the tokenizer's)
    are disallowed.
    """
    n, w = bitmask.shape
    bits = (bitmask.unsqueeze(-1) >> _BITS.to(bitmask.device)) & 1
    allowed = bits.reshape(n, w * 32).bool()
    if w * 32 >= vocab_size:
        return allowed[:, :vocab_size]
    pad = torch.zeros(n, vocab_size - w * 32, dtype=torch.bool, device=bitmask.device)
    return torch.cat([allowed, pad], dim=1)


def apply_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor,
                   rows: torch.Tensor | None = None) -> torch.Tensor:
    """Set disallowed logits to ``-inf`` in place.

    Args:
        logits: float ``[N, V]``.
        bitmask: int32 ``[M, W]`` (CPU or the logits' device).
        rows: int64 ``[M]`` row indices of ``logits`` the masks apply to; when
            ``None`` ``M == N`` and mask ``i`` applies to row ``i``.

    Returns:
        ``logits`` (modified in place).
    """
    allowed = bitmask_to_bool(bitmask.to(logits.device), logits.shape[-1])
    if rows is None:
        logits.masked_fill_(~allowed, float("-inf"))
    else:
        rows = rows.to(logits.device)
        logits[rows] = logits[rows].masked_fill(~allowed, float("-inf"))
    return logits
