"""Tool-call and reasoning formats of model families (one owner for the parser's markers,
the template's view of tools and the forced-call grammar). See ``format.py``."""

from loom.orchestrator.formats.detect import detect_format, renders_tools, template_source
from loom.orchestrator.formats.format import (
    DEFAULT,
    FORMATS,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    ParsedCall,
    ToolCallFormat,
)
from loom.orchestrator.formats.grammar import bound_schema, forced_call_grammar

__all__ = [
    "DEFAULT",
    "FORMATS",
    "HERMES",
    "LLAMA3_JSON",
    "MISTRAL",
    "ParsedCall",
    "ToolCallFormat",
    "bound_schema",
    "detect_format",
    "forced_call_grammar",
    "renders_tools",
    "template_source",
]
