"""The examples on the docs/ pages run (the machinery and its rules are in tests/test_readme.py).

A file of its own so ``make test``'s workers (``--dist loadfile``) run the
README's and the docs' examples side by side.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_readme import Unit, run_unit, server_port, unit_id, units  # noqa: F401 - server_port is a fixture

UNITS = units("docs")


@pytest.mark.parametrize("unit", UNITS, ids=[unit_id(u, i) for i, u in enumerate(UNITS)])
def test_docs_example_runs(unit: Unit, tmp_path: Path,
                           request: pytest.FixtureRequest) -> None:
    run_unit(unit, tmp_path, request)
