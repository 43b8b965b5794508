"""Speculative decoding: proposers, the lossless verifier and its counters.

``SpeculativeConfig`` selects the proposer (``NgramProposer``: prompt lookup;
or a draft model, see ``loom.runtime.spec_decode.draft_model``); ``rejection_sample`` is the
one verifier (Leviathan et al. 2023) for all proposers; ``SpecDecodeStats`` /
``SpecRequestStats`` count drafts and acceptances.
"""

from loom.runtime.spec_decode.config import SpeculativeConfig
from loom.runtime.spec_decode.metrics import SpecDecodeStats, SpecRequestStats
from loom.runtime.spec_decode.ngram import NgramProposer
from loom.runtime.spec_decode.rejection_sampler import VerifyResult, rejection_sample

__all__ = ["SpeculativeConfig", "NgramProposer", "rejection_sample", "VerifyResult",
           "SpecDecodeStats", "SpecRequestStats"]
