"""Eval targets: the in-process engine, an OpenAI-compatible HTTP server, HF transformers, the agent (rag)."""
