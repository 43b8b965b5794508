"""The verifier alone: greedy exactness and distribution equality (chi-square)."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from loom.runtime.spec_decode import rejection_sampler
from loom.runtime.spec_decode.rejection_sampler import rejection_sample

ALPHA = 1e-3  # fixed significance; fixed seeds make the outcome deterministic


def test_greedy_accepts_until_first_mismatch_then_emits_target_argmax() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4 + 5 + 1, 50, generator=g)
    am = logits.argmax(-1).tolist()
    # request 0: 3 drafts, second is wrong; request 1: 4 drafts all right; request 2: none
    d0 = [am[0], (am[1] + 1) % 50, am[2]]
    d1 = am[4:8]
    res = rejection_sample(logits.softmax(-1), [d0, d1, []], is_greedy=[True, True, True],
                           target_argmax=logits.argmax(-1))
    assert res.num_accepted == [1, 4, 0]
    assert res.token_ids[2] == [am[9]]
    assert res.token_ids[0] == [am[0], am[1]]
    assert res.token_ids[1] == am[4:8] + [am[8]]  # all accepted: bonus from the last row


def test_greedy_with_no_drafts_is_plain_argmax() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 30, generator=g)
    res = rejection_sample(logits.softmax(-1), [[], [], [], []], is_greedy=[True] * 4)
    assert res.token_ids == [[t] for t in logits.argmax(-1).tolist()]
    assert res.num_accepted == [0, 0, 0, 0]


def test_mixed_greedy_and_sampled_rows_keep_their_own_rows() -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2 + 1 + 3, 20, generator=g)
    am = logits.argmax(-1).tolist()
    res = rejection_sample(logits.softmax(-1), [[am[0]], [], [am[3], am[4]]],
                           is_greedy=[True, False, True])
    assert res.token_ids[0] == [am[0], am[1]]
    assert len(res.token_ids[1]) == 1
    assert res.token_ids[2] == [am[3], am[4], am[5]]


def test_seeded_requests_reproduce_their_draws() -> None:
    probs = torch.softmax(torch.randn(6, 10, generator=torch.Generator().manual_seed(3)), -1)
    drafts = [[1, 2], [3, 4]]

    def run() -> list[list[int]]:
        gens = {0: torch.Generator().manual_seed(7), 1: torch.Generator().manual_seed(8)}
        return rejection_sample(probs, drafts, [False, False], generators=gens).token_ids

    assert run() == run()


def _simulate(num: int, length: int, k: int, vocab: int, draft_kind: str,
              seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate ``length`` tokens for ``num`` independent sequences by speculation.

    The target is a Markov chain P[ctx] (ctx = previous token, row ``vocab`` =
    start); drafts come from a different chain Q (``draft_kind="q"``) or are a
    deterministic function of the context (``"onehot"``, like n-gram lookup).
    Each sequence drafts a random 0..k tokens per step.  Returns the generated
    tokens ``[num, length]`` and P.
    """
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    p_tab = torch.softmax(0.7 * torch.randn(vocab + 1, vocab, generator=g), -1)
    q_tab = torch.softmax(0.7 * torch.randn(vocab + 1, vocab, generator=g), -1)
    seqs: list[list[int]] = [[] for _ in range(num)]
    while min(len(s) for s in seqs) < length:
        n_drafts = torch.randint(0, k + 1, (num,), generator=g).tolist()
        drafts, t_rows, q_rows = [], [], []
        for i, s in enumerate(seqs):
            ctx = s[-1] if s else vocab
            d: list[int] = []
            for _ in range(n_drafts[i]):
                if draft_kind == "q":
                    q_rows.append(q_tab[ctx])
                    tok = int(torch.multinomial(q_tab[ctx], 1, generator=g))
                else:
                    tok = (ctx * 3 + 1) % vocab
                t_rows.append(p_tab[ctx])
                d.append(tok)
                ctx = tok
            t_rows.append(p_tab[ctx])
            drafts.append(d)
        q = torch.stack(q_rows) if draft_kind == "q" and q_rows else (
            torch.zeros(0, vocab) if draft_kind == "q" else None)
        res = rejection_sample(torch.stack(t_rows), drafts, [False] * num, draft_probs=q)
        for i, toks in enumerate(res.token_ids):
            seqs[i].extend(toks)
    return torch.tensor([s[:length] for s in seqs]), p_tab


def _chi2_pvalue(tokens: torch.Tensor, p_tab: torch.Tensor) -> float:
    """Chi-square of the joint distribution of the first 3 tokens vs the target chain."""
    vocab = p_tab.shape[1]
    start = p_tab[vocab]
    expected = torch.einsum("a,ab,bc->abc", start, p_tab[:vocab], p_tab[:vocab]).flatten()
    cells = tokens[:, 0] * vocab * vocab + tokens[:, 1] * vocab + tokens[:, 2]
    observed = torch.bincount(cells, minlength=vocab ** 3).double()
    expected = expected.double() / expected.double().sum() * len(tokens)
    assert float(expected.min()) >= 5  # the chi-square approximation holds
    return float(chisquare(observed.numpy(), expected.numpy()).pvalue)


@pytest.mark.parametrize("draft_kind", ["q", "onehot"])
def test_speculative_sampling_matches_target_distribution(draft_kind: str) -> None:
    tokens, p_tab = _simulate(num=8000, length=3, k=3, vocab=3, draft_kind=draft_kind, seed=0)
    assert _chi2_pvalue(tokens, p_tab) > ALPHA


def test_chi_square_detects_a_wrong_resampling_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    # resampling from p instead of norm(max(0, p - q)) is biased; the test must see it
    monkeypatch.setattr(rejection_sampler, "_residual", lambda p, *a: p)
    tokens, p_tab = _simulate(num=8000, length=3, k=3, vocab=3, draft_kind="q", seed=0)
    assert _chi2_pvalue(tokens, p_tab) < ALPHA
