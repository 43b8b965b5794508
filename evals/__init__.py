"""Loom evals package."""
