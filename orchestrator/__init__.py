"""Loom orchestrator package."""
