"""Built-in tools: document search, long-term memory and a safe calculator.

- :func:`search_documents_tool` (``search_documents``) over a retriever,
- :func:`memory_tools` (``remember``, ``recall``) over a long-term memory,
- :data:`calculator`, arithmetic evaluated by ``simpleeval`` (never ``eval``).
"""

from loom.tools.builtin.calculator import calculator, evaluate
from loom.tools.builtin.memory import memory_tools
from loom.tools.builtin.search import format_hits, search_documents_tool

__all__ = ["calculator", "evaluate", "format_hits", "memory_tools", "search_documents_tool"]
