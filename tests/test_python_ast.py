"""``loom.python_ast.parse``: a large parse is not broken by another thread's parse run from a finalizer."""

from __future__ import annotations

import ast
import inspect
import sys
import threading

import pytest

from loom.python_ast import parse

SOURCE = inspect.getsource(ast)  # ~60 KB of real Python: building its tree allocates enough to start the collector


class _ParsesWhenCollected:
    """Cyclic garbage whose finalizer runs Python code, so a collection can hand the GIL to another thread."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(200))


def _parse_many(parser, rounds: int) -> int:
    """Parse ``SOURCE`` ``rounds`` times while another thread parses small expressions; count the SystemErrors."""
    stop = threading.Event()

    def other() -> None:
        while not stop.is_set():
            _ParsesWhenCollected()
            try:
                ast.parse("1 + 2 * (3 if x else 4)")
            except SystemError:
                pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=other)
    thread.start()
    failures = 0
    try:
        for _ in range(rounds):
            try:
                parser(SOURCE)
            except SystemError:
                failures += 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    return failures


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race was measured on CPython 3.11")
def test_ast_parse_alone_fails_under_the_race_this_module_exists_for():
    assert _parse_many(ast.parse, 20) > 0


def test_parse_survives_a_concurrent_parse_started_from_a_finalizer():
    assert _parse_many(parse, 20) == 0


def test_parse_modes_and_errors_are_those_of_ast_parse():
    assert isinstance(parse("x = 1"), ast.Module)
    assert isinstance(parse("1 + 1", mode="eval"), ast.Expression)
    with pytest.raises(SyntaxError):
        parse("def (")
