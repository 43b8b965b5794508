"""Parse Python source safely in a threaded process: ``parse`` is ``ast.parse`` without a spurious ``SystemError``.

CPython 3.11 keeps the depth counter of its AST constructor in state shared by
every thread (python/cpython#106905).  Building a large tree allocates many
objects; an allocation can start the garbage collector, whose finalizers run
Python code, and the interpreter may hand the GIL to another thread there.  If
that thread parses anything (``traceback`` formats exceptions with
``ast.parse``), the first parse ends with ``SystemError: AST constructor
recursion depth mismatch``.  A two-thread script with finalizers made 18 of 20
parses of a 30 KB module fail; retrying still failed 13 of 20.

``parse`` therefore holds the garbage collector off while it builds the tree,
so no Python code runs on this thread during the parse, and serialises Loom's
own parses so that one parse cannot re-enable the collector under another.  A
leaf module (it imports nothing of Loom's), so every layer may use it.
"""

from __future__ import annotations

import ast
import gc
import threading
from typing import Literal, overload

_LOCK = threading.Lock()


@overload
def parse(source: str, filename: str = ..., mode: Literal["exec"] = ...) -> ast.Module: ...
@overload
def parse(source: str, filename: str = ..., *, mode: Literal["eval"]) -> ast.Expression: ...
def parse(source: str, filename: str = "<unknown>",
          mode: Literal["exec", "eval"] = "exec") -> ast.Module | ast.Expression:
    """``ast.parse(source, filename, mode)`` with the collector paused for its duration.

    Raises:
        SyntaxError, ValueError: as ``ast.parse`` (bad syntax, a null byte).
    """
    with _LOCK:
        enabled = gc.isenabled()
        gc.disable()
        try:
            tree = ast.parse(source, filename=filename, mode=mode)
        finally:
            if enabled:
                gc.enable()
    assert isinstance(tree, (ast.Module, ast.Expression))  # what the two modes return
    return tree
