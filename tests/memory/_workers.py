"""Writer processes for the concurrency and crash tests (spawned, so importable by name)."""

from __future__ import annotations

import json
import time

import numpy as np

from loom.memory import LongTermMemory


class PrecomputedEmbedder:
    """Real all-MiniLM-L6-v2 vectors computed by the parent test process, looked up by text.

    Worker processes then need not import torch and load the model (seconds each
    on the shared test machine); the vectors are the real embedder's.
    """

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def open_store(url: str, table: dict[str, np.ndarray]) -> LongTermMemory:
    # Thresholds at 1.0: only exact duplicates merge, these tests are about storage.
    return LongTermMemory(url, embedder=PrecomputedEmbedder(table), duplicate_threshold=1.0, conflict_threshold=1.0)


def write_all(url: str, namespace: str, texts: list[str], table: dict, start, out_path: str) -> None:
    """Wait for ``start``, add every text, write the events as JSON to ``out_path``."""
    mem = open_store(url, table)
    start.wait(30)
    events = []
    for text in texts:
        events += [[e.event.value, e.id, e.text] for e in mem.add(text, namespace)]
    with open(out_path, "w") as f:
        json.dump(events, f)


def write_forever(url: str, namespace: str, texts: list[str], table: dict, log_path: str) -> None:
    """Add texts one by one, logging ``id<TAB>text`` after each commit; then idle until killed."""
    mem = open_store(url, table)
    with open(log_path, "a") as log:
        for text in texts:
            event = mem.add(text, namespace)[0]
            log.write(f"{event.id}\t{text}\n")
            log.flush()
    while True:
        time.sleep(1)
