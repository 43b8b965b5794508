"""Embedder: real all-MiniLM-L6-v2, normalised float32, one model per process."""

from __future__ import annotations

import numpy as np
import pytest

from loom.retrieval.embedder import Embedder
from tests.openmp_probe import needs_two_cpus, run_probe


def test_encode_returns_normalised_float32_rows(embedder: Embedder) -> None:
    v = embedder.encode(["os.path.join joins paths", "asyncio.gather runs awaitables"])
    assert v.shape == (2, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)
    assert embedder.encode("one string").shape == (1, 384)


def test_query_path_and_batch_path_give_the_same_vectors(embedder: Embedder) -> None:
    texts = [f"sentence number {i} about rivers" for i in range(10)]
    batch = embedder.encode(texts)  # > 8 texts: torch's own thread count
    single = np.stack([embedder.encode([t])[0] for t in texts[:3]])  # one-thread path
    np.testing.assert_allclose(single, batch[:3], atol=1e-5)


def test_semantically_close_texts_score_higher(embedder: Embedder) -> None:
    q, a, b = embedder.encode(["how do I join file paths", "os.path.join concatenates path "
                               "components", "the recipe needs flour and water"])
    assert q @ a > q @ b


def test_model_is_loaded_once_per_process_and_device(embedder: Embedder) -> None:
    assert Embedder(device="cpu").model is embedder.model


def test_invalid_settings_raise_value_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        Embedder(batch_size=0)
    with pytest.raises(ValueError, match="small_batch_threads"):
        Embedder(small_batch_threads=0)



_BATCH = r"""
from loom.retrieval.embedder import SMALL_BATCH, Embedder
e = Embedder(device="cpu")
e.encode(["load the model first"])  # one thread: a query starts no OpenMP worker
before = tasks()
e.encode([f"passage number {i} about retrieval" for i in range(4 * SMALL_BATCH)])
print(before, tasks())
"""


@needs_two_cpus
def test_a_batch_on_cpu_leaves_the_calling_thread_no_openmp_worker() -> None:
    # loom.runtime.threads: a serving process's engine thread must own the only OpenMP team
    before, after = run_probe(_BATCH)[-2:]
    assert int(after) == int(before)
