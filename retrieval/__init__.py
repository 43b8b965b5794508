"""Loom retrieval package."""
