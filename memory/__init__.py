"""Loom long-term memory: facts per namespace in SQL, with duplicate/conflict-aware write-back.

Usage::

    from loom.memory import LongTermMemory
    mem = LongTermMemory("sqlite:///memory.db")
    mem.add("My name is Ada", namespace="user-1")   # [MemoryEvent(ADD #1)]
    mem.add("My name is Bea", namespace="user-1")   # [MemoryEvent(UPDATE #2, previous_id=1)]
    mem.search("what is the user called?", namespace="user-1")  # [MemoryHit(#2 ...)]

Modules: ``long_term`` (public class), ``policy`` + ``text`` (ADD/UPDATE/NOOP rules),
``scoring`` (rank and eviction formulas), ``search`` + ``snapshot`` (exact search,
vector cache), ``writes`` (locked write path), ``models`` + ``db`` + ``store`` (SQL),
``extractors`` (facts from a turn), ``embedder`` (protocol and MiniLM default).
"""

from .embedder import Embedder, SentenceTransformerEmbedder, default_embedder
from .extractors import Extractor, LLMExtractor, RuleBasedExtractor, facts_schema, parse_facts
from .long_term import LongTermMemory
from .scoring import ScoringConfig
from .types import EventType, ForgetRequest, HeldFact, MemoryEvent, MemoryHit, MemoryItem, MemorySource

__all__ = [
    "Embedder",
    "EventType",
    "Extractor",
    "ForgetRequest",
    "HeldFact",
    "LLMExtractor",
    "LongTermMemory",
    "MemoryEvent",
    "MemoryHit",
    "MemoryItem",
    "MemorySource",
    "RuleBasedExtractor",
    "ScoringConfig",
    "SentenceTransformerEmbedder",
    "default_embedder",
    "facts_schema",
    "parse_facts",
]
