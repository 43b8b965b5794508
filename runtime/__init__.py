"""Loom runtime: the in-process LLM engine."""
