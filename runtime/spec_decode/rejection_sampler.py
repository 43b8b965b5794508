"""Lossless verification of drafted tokens (speculative sampling).

Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding" (arXiv 2211.17192), and Chen et al. 2023 (arXiv
2302.01318).  For drafted tokens x_1..x_n with draft probabilities q_j and the
target's probabilities p_j at the same positions (one target forward pass):

* greedy requests accept x_j while it equals argmax p_j;
* sampling requests accept x_j with probability min(1, p_j(x_j) / q_j(x_j));
  at the first rejection the token is resampled from
  norm(max(0, p_j - q_j)); drafts after it are discarded;
* when all n are accepted a bonus token is drawn from p_{n+1}.

Every step therefore emits between 1 and n + 1 tokens and the emitted
sequence has exactly the target's distribution.  Deterministic drafts (n-gram
lookup, a greedy draft model) are q = one-hot on the drafted token, so the
acceptance probability is p(x) and the residual is p with x removed.

Deterministic drafts — every proposer Loom has — take ``match_drafts``: the
target's token is drawn at each position by inverse CDF, exactly as the plain
sampler draws it, and drafts are accepted while they equal it.  With q one-hot
this *is* the rule above: x is accepted with probability p(x), and a rejected
position's token is distributed as p without x, renormalised, which is
norm(max(0, p - q)).  Because a seeded request takes one uniform from its own
generator per emitted token (``loom.runtime.sampler.seeded_uniform``), its output
is the same whether its drafts were verified or it decoded plainly, alone or in
any batch (speculation switches off at ``disable_by_batch_size``).

General q (``draft_probs``) takes the accept / residual path; its categorical
draws use the exponential race (argmax of p / Exp(1)), so a batch of draws is
one tensor op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from loom.runtime.sampler import inverse_cdf, seeded_uniform


@dataclass
class VerifyResult:
    """Per request: the tokens to append and how many drafts were accepted.

    ``token_ids[i]`` = the first ``num_accepted[i]`` drafts of request i
    followed by one resampled (on rejection) or bonus (all accepted) token.
    """

    token_ids: list[list[int]]
    num_accepted: list[int]


def rejection_sample(
    target_probs: torch.Tensor | None,
    draft_token_ids: Sequence[Sequence[int]],
    is_greedy: Sequence[bool],
    draft_probs: torch.Tensor | None = None,
    target_argmax: torch.Tensor | None = None,
    generators: Mapping[int, torch.Generator] | None = None,
    default_generator: torch.Generator | None = None,
) -> VerifyResult:
    """Verify every request's drafts against the target in one batched call.

    Args:
        target_probs: float ``[T, V]``, ``T = sum_i (n_i + 1)``: for request i,
            ``n_i + 1`` consecutive rows = the target's (temperature / top-k /
            top-p / grammar-processed) distribution before each draft and after
            the last one.  May be ``None`` when every request is greedy and
            ``target_argmax`` is given.
        draft_token_ids: ``B`` lists, request i's ``n_i`` drafted ids (may be empty).
        is_greedy: ``[B]`` whether request i decodes greedily.
        draft_probs: float ``[sum_i n_i, V]``, the draft distribution each draft
            was sampled from; ``None`` means one-hot on the drafted token.
        target_argmax: int64 ``[T]`` argmax of the raw target logits (used by
            greedy requests, so ties break exactly as non-speculative greedy);
            default ``target_probs.argmax(-1)``.
        generators: request index -> generator for seeded requests.
        default_generator: generator of the other requests (the engine's);
            ``None`` uses torch's global one.

    Returns:
        ``VerifyResult`` with ``1 <= len(token_ids[i]) <= n_i + 1``.
    """
    if draft_probs is None or all(is_greedy):
        return match_drafts(target_probs, draft_token_ids, is_greedy, target_argmax,
                            generators, default_generator)
    if target_probs is None:
        raise ValueError("rejection_sample: target_probs is required when a request samples")
    device = target_probs.device
    b = len(draft_token_ids)
    n = torch.tensor([len(d) for d in draft_token_ids], dtype=torch.long, device=device)
    k = int(n.max()) if b else 0
    rows0 = torch.cumsum(n + 1, 0) - (n + 1)  # first target row of each request
    drafts = torch.zeros(b, k, dtype=torch.long, device=device)
    for i, d in enumerate(draft_token_ids):
        if d:
            drafts[i, :len(d)] = torch.as_tensor(list(d), dtype=torch.long, device=device)
    pos = torch.arange(k, device=device)
    valid = pos[None, :] < n[:, None]  # [B, K]
    trow = (rows0[:, None] + pos[None, :]).clamp(max=target_probs.shape[0] - 1)
    if target_argmax is None:
        target_argmax = target_probs.argmax(-1)
    greedy = torch.as_tensor(list(is_greedy), dtype=torch.bool, device=device)

    drow = None
    if draft_probs is not None:
        drow = ((torch.cumsum(n, 0) - n)[:, None] + pos[None, :]).clamp(
            min=0, max=max(draft_probs.shape[0] - 1, 0))
    accept = _accept(target_probs, target_argmax, drafts, trow, drow, draft_probs,
                     greedy, valid, generators, default_generator)
    num_acc = torch.cumprod(accept.to(torch.long), dim=1).sum(dim=1)  # [B]

    last_row = rows0 + num_acc
    p_last = target_probs[last_row]  # [B, V]
    rejected = num_acc < n
    dist = p_last.clone()
    if bool(rejected.any()):
        dist[rejected] = _residual(p_last[rejected], drafts, num_acc, rejected,
                                   draft_probs, drow)
    sampled = _categorical(dist, generators, default_generator)
    final = torch.where(greedy, target_argmax[last_row], sampled)

    drafts_l, acc_l, final_l = drafts.tolist(), num_acc.tolist(), final.tolist()
    out = [drafts_l[i][:acc_l[i]] + [final_l[i]] for i in range(b)]
    return VerifyResult(token_ids=out, num_accepted=acc_l)


def match_drafts(
    target_probs: torch.Tensor | None,
    draft_token_ids: Sequence[Sequence[int]],
    is_greedy: Sequence[bool],
    target_argmax: torch.Tensor | None = None,
    generators: Mapping[int, torch.Generator] | None = None,
    default_generator: torch.Generator | None = None,
) -> VerifyResult:
    """Verify deterministic (one-hot) drafts by drawing the target's own token at each position.

    Arguments as ``rejection_sample``.  Greedy requests use ``target_argmax``;
    ``target_probs`` may be ``None`` only when every request is greedy and
    ``target_argmax`` is given (else ``ValueError``).
    Unseeded sampling requests draw all their positions' uniforms in one call
    from ``default_generator``; a seeded request draws one uniform per
    position it reaches from its own generator, and stops at the first
    position whose token differs from the draft (that token is emitted), so it
    consumes its stream exactly as plain decoding would.

    Returns:
        ``VerifyResult``; ``token_ids[i]`` is the accepted drafts then one token.
    """
    if target_probs is None and (target_argmax is None or not all(is_greedy)):
        raise ValueError("match_drafts: target_probs is required unless every request is greedy with target_argmax")
    if target_argmax is None:
        assert target_probs is not None
        target_argmax = target_probs.argmax(-1)
    tokens = target_argmax.tolist()
    gens = generators or {}
    starts, pos = [], 0
    for d in draft_token_ids:
        starts.append(pos)
        pos += len(d) + 1
    batch_rows = [starts[i] + j for i, d in enumerate(draft_token_ids)
                  if not is_greedy[i] and i not in gens for j in range(len(d) + 1)]
    if batch_rows:
        assert target_probs is not None  # some request samples (checked above)
        idx = torch.tensor(batch_rows, device=target_probs.device)
        u = torch.rand(len(batch_rows), 1, generator=default_generator,
                       device=target_probs.device, dtype=target_probs.dtype)
        for row, tok in zip(batch_rows, inverse_cdf(target_probs[idx], u).tolist()):
            tokens[row] = tok
    out, accepted = [], []
    for i, d in enumerate(draft_token_ids):
        row, g = starts[i], gens.get(i)
        n = 0
        while True:
            if g is not None and not is_greedy[i]:
                assert target_probs is not None
                p = target_probs[row + n:row + n + 1]
                tokens[row + n] = int(inverse_cdf(p, seeded_uniform(g, p).view(1, 1))[0])
            if n < len(d) and tokens[row + n] == d[n]:
                n += 1
                continue
            break
        out.append(list(d[:n]) + [tokens[row + n]])
        accepted.append(n)
    return VerifyResult(token_ids=out, num_accepted=accepted)


def _uniform(b: int, k: int, device: torch.device,
             generators: Mapping[int, torch.Generator] | None,
             default: torch.Generator | None) -> torch.Tensor:
    u = torch.rand(b, k, device=device, generator=default)
    for i, g in (generators or {}).items():
        u[i] = torch.rand(k, generator=g, device=g.device).to(device)
    return u


def _accept(target_probs: torch.Tensor, target_argmax: torch.Tensor, drafts: torch.Tensor,
            trow: torch.Tensor, drow: torch.Tensor | None, draft_probs: torch.Tensor | None,
            greedy: torch.Tensor, valid: torch.Tensor,
            generators: Mapping[int, torch.Generator] | None,
            default: torch.Generator | None) -> torch.Tensor:
    """bool ``[B, K]``: whether each draft passes its own test (before the prefix cut)."""
    b, k = drafts.shape
    p_x = target_probs[trow, drafts]  # [B, K]
    if draft_probs is None:
        q_x = torch.ones_like(p_x)
    else:
        q_x = draft_probs[drow, drafts]
    u = _uniform(b, k, target_probs.device, generators, default)
    # u < p/q  <=>  u * q < p (q > 0 for a token the draft actually sampled)
    stochastic = u * q_x < p_x
    exact = target_argmax[trow] == drafts
    return valid & torch.where(greedy[:, None], exact, stochastic)


def _residual(p: torch.Tensor, drafts: torch.Tensor, num_acc: torch.Tensor,
              rejected: torch.Tensor, draft_probs: torch.Tensor | None,
              drow: torch.Tensor | None) -> torch.Tensor:
    """norm(max(0, p - q)) at each rejected request's first rejected position."""
    idx = torch.nonzero(rejected).squeeze(1)
    j = num_acc[idx]
    if draft_probs is None:
        q = torch.zeros_like(p)
        q[torch.arange(idx.numel(), device=p.device), drafts[idx, j]] = 1.0
    else:
        assert drow is not None  # computed whenever draft_probs is given
        q = draft_probs[drow[idx, j]]
    res = (p - q).clamp_min(0.0)
    total = res.sum(-1, keepdim=True)
    # p == q up to rounding: the rejection had probability ~0; fall back to p
    return torch.where(total > 0, res / total.clamp_min(1e-30), p)


def _categorical(probs: torch.Tensor, generators: Mapping[int, torch.Generator] | None,
                 default: torch.Generator | None) -> torch.Tensor:
    """One draw per row of ``probs`` ``[B, V]`` (exponential race), int64 ``[B]``."""
    noise = torch.empty_like(probs).exponential_(generator=default)
    for i, g in (generators or {}).items():
        noise[i] = torch.empty(probs.shape[1], device=g.device).exponential_(generator=g).to(
            probs.device)
    return (probs / noise).argmax(-1)
