"""Loom memory package."""
