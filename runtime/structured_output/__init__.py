"""Grammar-constrained decoding (JSON schema, regex, Lark) with llguidance.

``StructuredOutputParams`` is what a request asks for (``SamplingParams.structured_output``);
``GrammarBackend`` compiles it once per spec and validates at submission;
``GrammarMatcher`` is the per-request state that fills token bitmasks, checks
drafted tokens and rolls back; ``apply_bitmask_`` masks logits;
``tool_call_schema`` builds the schema of a forced tool call.
"""

from loom.runtime.structured_output.bitmask import allocate_bitmask, apply_bitmask_, bitmask_to_bool
from loom.runtime.structured_output.params import StructuredOutputParams
from loom.runtime.structured_output.tool_call import tool_call_schema


def __getattr__(name: str):  # llguidance/transformers load only when the backend is used
    if name in ("GrammarBackend", "CompiledGrammar"):
        from loom.runtime.structured_output import backend
        return getattr(backend, name)
    if name == "GrammarMatcher":
        from loom.runtime.structured_output.matcher import GrammarMatcher
        return GrammarMatcher
    raise AttributeError(name)


__all__ = [
    "StructuredOutputParams", "tool_call_schema", "GrammarBackend", "CompiledGrammar",
    "GrammarMatcher", "allocate_bitmask", "apply_bitmask_", "bitmask_to_bool",
]
