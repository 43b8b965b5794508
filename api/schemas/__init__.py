"""Pydantic models of everything that crosses the HTTP API."""
