"""Loom api package."""
