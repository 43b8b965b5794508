"""Loom tools package."""
