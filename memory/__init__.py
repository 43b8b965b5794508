"""Loom long-term memory: facts per namespace in SQL, with duplicate/conflict-aware write-back.

>>> from memory import LongTermMemory
>>> mem = LongTermMemory("sqlite:///memory.db")
>>> mem.add("My name is Ada", namespace="user-1")          # [MemoryEvent(ADD ...)]
>>> mem.add("My name is Bea", namespace="user-1")          # [MemoryEvent(UPDATE ...)]
>>> mem.search("what is the user called?", namespace="user-1")
"""

from .embedder import Embedder, SentenceTransformerEmbedder, default_embedder
from .extractors import Extractor, LLMExtractor, RuleBasedExtractor, facts_schema, parse_facts
from .long_term import LongTermMemory
from .scoring import ScoringConfig
from .types import EventType, MemoryEvent, MemoryHit, MemoryItem, MemorySource

__all__ = [
    "Embedder",
    "EventType",
    "Extractor",
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
